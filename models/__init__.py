"""The Keras models tfmp trains and benchmarks: the tutorial's GAN, MobileNetV2, ResNet-50 and a small test CNN.

Model definitions only (architectures, no training); `tfmp.run.tasks` turns them into runs.
"""

__all__ = ["gan", "heads", "mobilenet_v2", "resnet50", "small_cnn"]
