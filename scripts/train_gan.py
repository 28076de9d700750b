r"""Trains the original tutorial's GAN (generator + discriminator) with mixed precision.

    python3 scripts/train_gan.py --dataset=digits --batch_size=256 --epochs=3 \
        --precision=mixed_float16 --loss_scale=dynamic
    tensorboard --logdir logs

Defaults are the tutorial's: MNIST, batch 4096, Adam(1e-3) / RMSprop(1e-4).
"""

from absl import flags

# common first: importing it imports TensorFlow quietly.
try:  # installed: the tfmp_scripts package; run from a checkout: this folder
    from tfmp_scripts import common
except ImportError:  # pragma: no cover
    import common

from tfmp.run import training

_FLAGS = common.define_flags(training.GANConfig())
flags.adopt_module_key_flags(common)  # --help lists common's flags too
main = common.make_main(training.GANConfig, training.train_gan, _FLAGS)


run = common.entry_point(main, __name__)  # the console command `tfmp-train-gan`


if __name__ == "__main__":
    run()
