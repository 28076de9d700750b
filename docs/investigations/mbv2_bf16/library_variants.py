"""What the library's two changes each buy, measured with tfmp's own benchmark.

    PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=2 python3 docs/investigations/mbv2_bf16/library_variants.py [STEPS REPEATS]

Rows (one `tfmp.run.benchmark.compare` run, float32 and mixed_bfloat16 each):
`*_keras_bn` build the models with Keras's unfused BatchNormalization
(`fused_batch_norm=False`, the models before issue 4); `*_fused_bn` with
`tfmp.layers.FusedBatchNormalization`; `mobilenet_v2_fused_bn_dw_f32` adds
the default per-layer advice (depthwise convolutions in float32 under
bfloat16 on CPU), which is what `tfmp.run.training` and the benchmark run now.
Prints the markdown table, then each row's throughput against the
`*_keras_bn` float32 row of its model.

Historical: written against the benchmark's model specs (`GANSpec`,
`ClassifierSpec`), which issue 15 replaced by `tfmp.run.tasks` (the benchmark now
builds from the same Task as training, and a Task has no hook for an
unfused-BatchNorm generator). To repeat it, check out commit 0e036a8 and run
it there.
"""

import functools
import sys

from tfmp.models.gan import build_generator
from tfmp.models.mobilenet_v2 import build_mobilenet_v2_classifier, cpu_bfloat16_float32_layers
from tfmp.run import benchmark
from tfmp.run import reporting


def _mbv2(fused: bool):
    return functools.partial(build_mobilenet_v2_classifier, (32, 32, 3), num_classes=10, batch_norm_momentum=0.9,
                             fused_batch_norm=fused)


def main(steps: int = 2, repeats: int = 9) -> None:
    specs = {
        "gan_keras_bn": benchmark.GANSpec("gan_keras_bn", functools.partial(build_generator, fused_batch_norm=False)),
        "gan_fused_bn": benchmark.GANSpec("gan_fused_bn"),
        "mobilenet_v2_keras_bn": benchmark.ClassifierSpec("mobilenet_v2_keras_bn", _mbv2(False), (32, 32, 3)),
        "mobilenet_v2_fused_bn": benchmark.ClassifierSpec("mobilenet_v2_fused_bn", _mbv2(True), (32, 32, 3)),
        "mobilenet_v2_fused_bn_dw_f32": benchmark.ClassifierSpec(
            "mobilenet_v2_fused_bn_dw_f32", _mbv2(True), (32, 32, 3),
            cpu_bfloat16_float32_layers=cpu_bfloat16_float32_layers((32, 32, 3))),
    }
    config = benchmark.BenchmarkConfig(
        models=tuple(specs), precisions=("float32", "mixed_bfloat16"), xla=(False,), steps=steps, repeats=repeats)
    records = benchmark.compare(config, specs, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(reporting.markdown_table(records))
    baseline = {r.model.split("_keras_bn")[0]: r.images_per_sec for r in records
                if r.model.endswith("_keras_bn") and r.precision == "float32"}
    print("\n| model | precision | img/s | vs Keras-BN float32 |\n|---|---|---|---|")
    for r in records:
        base = baseline["gan" if r.model.startswith("gan") else "mobilenet_v2"]
        print(f"| {r.model} | {r.precision} | {r.images_per_sec:.1f} | {r.images_per_sec / base:.2f}x |")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
