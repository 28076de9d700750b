"""A drop-in keras.layers.BatchNormalization that runs TF's fused kernel.

FusedBatchNormalization keeps Keras 3's semantics exactly (biased batch
variance for normalisation *and* for the moving-variance update, Keras's
momentum update, float32 gamma/beta/moving statistics, output in the layer's
compute dtype) but computes with tf.raw_ops.FusedBatchNormV3 on 4D NHWC inputs
(and NCHW when axis=1), which accepts bfloat16/float16 x with float32
scale/offset/statistics and has oneDNN (CPU) and cuDNN (GPU) kernels. Anything
else (masks, renorm, synchronized, other ranks/axes, float64) falls back to the
Keras implementation.
"""
import keras
import tensorflow as tf

_FUSED_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


@keras.saving.register_keras_serializable(package="tfmp")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    # Half-precision inputs whose channel count is not a multiple of this are
    # normalised in float32 (a CPU/oneDNN performance workaround).
    bf16_channel_multiple = 16

    def _fused_ok(self, inputs, mask):
        if mask is not None or self.renorm or self.synchronized:
            return False
        if len(inputs.shape) != 4 or inputs.dtype not in _FUSED_DTYPES:
            return False
        return self.axis in (-1, 3, 1)

    def call(self, inputs, training=None, mask=None):
        if not self._fused_ok(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        data_format = "NCHW" if self.axis == 1 else "NHWC"
        channels = inputs.shape[self.axis]
        x = inputs
        if x.dtype != tf.float32 and channels is not None and channels % self.bf16_channel_multiple:
            # oneDNN's bf16 batch norm falls back to a slow generic kernel
            # ("nspc_bnorm:any") unless channels are a multiple of 16; the
            # float32 kernel is fast for any width, so compute in float32.
            x = tf.cast(x, tf.float32)
        # BN variables are created with autocast=False: these reads are float32.
        gamma = tf.cast(self.gamma, tf.float32) if self.scale else tf.ones((channels,), tf.float32)
        beta = tf.cast(self.beta, tf.float32) if self.center else tf.zeros((channels,), tf.float32)
        if training and self.trainable:
            empty = tf.constant([], tf.float32)
            y, mean, var, _, _, _ = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=gamma, offset=beta, mean=empty, variance=empty,
                epsilon=self.epsilon, exponential_avg_factor=1.0,
                data_format=data_format, is_training=True)
            # FusedBatchNormV3 returns the Bessel-corrected variance n/(n-1) *
            # biased; Keras normalises with, and averages, the biased one.
            shape = tf.shape(x)
            n = tf.cast(tf.reduce_prod(shape) // shape[self.axis], tf.float32)
            var = var * ((n - 1.0) / tf.maximum(n, 1.0))
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + tf.stop_gradient(mean) * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + tf.stop_gradient(var) * (1.0 - m))
        else:
            y, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=gamma, offset=beta,
                mean=tf.cast(self.moving_mean, tf.float32),
                variance=tf.cast(self.moving_variance, tf.float32),
                epsilon=self.epsilon, exponential_avg_factor=1.0,
                data_format=data_format, is_training=False)
        return tf.cast(y, self.compute_dtype)
