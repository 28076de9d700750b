"""Numerical equivalence of FusedBatchNormalization vs keras BatchNormalization."""
from common import *
from fused_bn import FusedBatchNormalization
np.random.seed(0)
results = []
for shape, axis in [((16, 8, 8, 24), -1), ((4, 5, 7, 3), -1), ((8, 6, 4, 4), 1), ((2, 1, 1, 960), -1)]:
    for pol in ["float32", "mixed_bfloat16"]:
        with policy(pol):
            kb = keras.layers.BatchNormalization(axis=axis, momentum=0.9, epsilon=1e-3)
            fb = FusedBatchNormalization(axis=axis, momentum=0.9, epsilon=1e-3)
        x = tf.constant(np.random.randn(*shape).astype(np.float32) * 3 + 1.5)
        kb.build(shape); fb.build(shape)
        ch = shape[axis]
        g = np.random.rand(ch).astype(np.float32) + 0.5; b = np.random.randn(ch).astype(np.float32)
        mm = np.random.randn(ch).astype(np.float32); mv = np.random.rand(ch).astype(np.float32) + 0.5
        for l in (kb, fb):
            l.set_weights([g, b, mm, mv])
        dy = tf.constant(np.random.randn(*shape).astype(np.float32))
        out = {}
        for nm, l in (("keras", kb), ("fused", fb)):
            with tf.GradientTape() as t:
                t.watch(x)
                y = l(x, training=True)
                loss = tf.reduce_sum(tf.cast(y, tf.float32) * dy)
            gx, gg, gb = t.gradient(loss, [x, l.gamma, l.beta])
            yi = l(x, training=False)
            out[nm] = dict(y=y, gx=gx, gg=gg, gb=gb, mm=l.moving_mean, mv=l.moving_variance, y_inf=yi)
        row = [f"{str(shape):18s} axis={axis:2d} {pol:15s} dtype={out['fused']['y'].dtype.name:8s}"]
        for k in ["y", "gx", "gg", "gb", "mm", "mv", "y_inf"]:
            a = np.asarray(tf.cast(out["keras"][k], tf.float32)); c = np.asarray(tf.cast(out["fused"][k], tf.float32))
            err = np.max(np.abs(a - c)) / (np.max(np.abs(a)) + 1e-12)
            row.append(f"{k}:{err:.1e}")
        print("  ".join(row))
# jit_compile and tf.function
with policy("mixed_bfloat16"):
    fb = FusedBatchNormalization()
x = tf.random.normal((8, 4, 4, 16))
f = tf.function(lambda x: fb(x, training=True), jit_compile=True)
print("jit ok", f(x).dtype, f(x).shape)
print("config roundtrip:", type(keras.layers.deserialize(keras.layers.serialize(fb))).__name__)
