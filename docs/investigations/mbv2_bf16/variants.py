"""MobileNetV2 / GAN variants by layer substitution (keras.models.clone_model)."""
from common import *
from fused_bn import FusedBatchNormalization


class F32ActConv2D(keras.layers.Conv2D):
    """Conv2D whose activation (e.g. tanh) is evaluated in float32."""
    def call(self, inputs):
        act = self.activation
        self.activation = None
        try:
            y = super().call(inputs)
        finally:
            self.activation = act
        if act is None:
            return y
        return tf.cast(act(tf.cast(y, tf.float32)), self.compute_dtype)


def _sub(fused_bn=False, bn_f32=False, relu_f32=False, dw_f32=False, dw_sel_f32=False, act_f32=False,
         dw_block_f32=False):
    def fn(layer):
        cfg = layer.get_config()
        cls = type(layer)
        if isinstance(layer, keras.layers.BatchNormalization):
            if fused_bn:
                cls = FusedBatchNormalization
            if bn_f32 or (dw_block_f32 and "depthwise" in layer.name):
                cfg["dtype"] = "float32"
        elif isinstance(layer, keras.layers.ReLU) and (relu_f32 or (dw_block_f32 and "depthwise" in layer.name)):
            cfg["dtype"] = "float32"
        elif isinstance(layer, keras.layers.Conv2D) and not isinstance(layer, keras.layers.DepthwiseConv2D) \
                and act_f32 and cfg.get("activation") not in (None, "linear"):
            cls = F32ActConv2D
        elif isinstance(layer, keras.layers.DepthwiseConv2D):
            if dw_f32 or dw_block_f32 or (dw_sel_f32 and (tuple(layer.strides) != (1, 1) or layer.input.shape[1] < 4)):
                cfg["dtype"] = "float32"
        return cls.from_config(cfg)
    return fn


def build_mbv2_variant(pol, alpha=1.0, **kw):
    with policy(pol):
        m = mb.build_mobilenet_v2_classifier((32, 32, 3), num_classes=10, alpha=alpha, batch_norm_momentum=0.9)
        if kw:
            m = keras.models.clone_model(m, clone_function=_sub(**kw), recursive=True)
    return m


def build_gan_variant(pol, fused_bn=False, **kw):
    with policy(pol):
        g, d = gan.build_generator(), gan.build_discriminator()
        if fused_bn or kw:
            g = keras.models.clone_model(g, clone_function=_sub(fused_bn=fused_bn, **kw))
    return g, d
