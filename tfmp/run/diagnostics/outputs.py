"""Float32 outputs: model outputs, softmax/sigmoid layers and losses computed in 16 bits.

`float32_output_report(model)` finds what must stay float32 (model outputs,
softmax/sigmoid and the loss's inputs) but is computed in float16 or
bfloat16, and says how to keep it in float32. The outputs and layers are the
core's `tfmp.float32_layers.output_findings`, which a user's own code runs
too (`check_outputs`); this report adds the losses and the table.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfmp import trainers as trainers_lib
from tfmp.float32_layers import OutputFinding, is_graph_model, output_findings
from tfmp.run.diagnostics import _report
from tfmp.run.diagnostics._report import Source, networks, table

__all__ = ["OutputFinding", "OutputReport", "float32_output_report"]


@dataclasses.dataclass
class OutputReport:
    """The findings of `float32_output_report`."""

    findings: list[OutputFinding]

    def __str__(self) -> str:
        title = "Float32 outputs (outputs, softmax/sigmoid and the loss should stay float32):"
        if not self.findings:
            return f"{title}\n  every output, softmax/sigmoid and loss input is float32."
        rows = [(f.where, f.what, f.dtype, f.fix) for f in self.findings]
        return "\n".join([title, table(("where", "computed in low precision", "dtype", "fix"), rows)])


def float32_output_report(source: Source, loss: Any = None, print_fn: Any = _report.UNSET) -> OutputReport:
    """Finds what should be float32 but is computed in float16 or bfloat16.

    * a model output in 16 bits (add a float32 `Activation("linear")`), and a
      softmax, log-softmax or sigmoid computed in 16 bits, anywhere: see
      `tfmp.float32_layers.output_findings`, which finds them;
    * a loss computed on 16-bit outputs: a compiled (or given) loss, or, for
      a trainer, the networks its losses read (`trainer.loss_networks`).

    Args:
        source: A `keras.Model` or a trainer.
        loss: The loss applied to a model's outputs, if it is not compiled.
        print_fn: Deprecated (tfmp 0.1 printed the report with it): warns, and still prints.

    Returns:
        The `OutputReport`; its `str()` is the table.
    """
    findings: list[OutputFinding] = []
    if isinstance(source, trainers_lib.MixedPrecisionTrainer):
        loss_networks = set(source.loss_networks)
    else:
        has_loss = loss is not None or getattr(source, "loss", None) is not None
        loss_networks = set(networks(source)) if has_loss else set()
    for name, model in networks(source).items():
        # A subclassed model's findings include its sub-models' outputs, which its loss need not read.
        reads_outputs = name in loss_networks and is_graph_model(model)
        for finding in output_findings(model):
            findings.append(finding)
            if reads_outputs and finding.what == "model output":
                findings.append(
                    OutputFinding(
                        finding.where,
                        "loss input (logits/probabilities)",
                        finding.dtype,
                        "compute the loss on float32 outputs (the same fix)",
                    )
                )
    report = OutputReport(findings)
    _report.removed_print_fn("float32_output_report", print_fn, report)
    return report
