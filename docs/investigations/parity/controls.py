"""Paired runs with Keras's unfused BatchNormalization: the control for the fused layer (docs/NUMERICS.md).

    python3 docs/investigations/parity/controls.py OUT.jsonl keras float32,mixed_float16 0,1,2,3,4

Arguments: the JSON-lines file to append to, `keras` (Keras's BatchNormalization) or `fused` (tfmp's, as
`tfmp-parity` runs), precisions and seeds. The settings are `tfmp-parity`'s defaults; each line is one run.
"""
import dataclasses, functools, json, os, re, sys, time
from tfmp.run import training
import tfmp.models.mobilenet_v2 as mb

out, bn, precisions, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(","), [int(s) for s in sys.argv[4].split(",")]
if bn == "keras":
    training.build_mobilenet_v2_classifier = functools.partial(mb.build_mobilenet_v2_classifier, fused_batch_norm=False)
BASE = training.ClassifierConfig(dataset="digits", alpha=0.35, batch_size=32, epochs=8, learning_rate=2e-3,
    lr_schedule="cosine", log_every=1, warmup_steps=0, loss_scale="dynamic")
stamp = time.strftime("%H%M%S")
for seed in seeds:
    for p in precisions:
        lines = []
        t, l0 = time.time(), os.getloadavg()[0]
        r = training.train_classifier(dataclasses.replace(BASE, precision=p, seed=seed, logdir=f"/tmp/parity_ctrl_{stamp}",
                                                          run_name=f"{bn}_{p}_{seed}"), print_fn=lines.append)
        scales = [m.group(1) for m in (re.search(r"loss_scale: (\S+),", l) for l in lines) if m]
        drops = [i for i in range(1, len(scales)) if scales[i] != scales[i - 1]]
        rec = dict(bn=bn, precision=p, seed=seed, val_accuracy=r.logs["val_accuracy"], val_loss=r.logs["val_loss"],
                   skipped_steps=r.skipped_steps, final_loss_scale=r.logs.get("loss_scale"), scale_changes_at=drops,
                   seconds=round(time.time() - t, 1), load=(l0, os.getloadavg()[0]))
        print(json.dumps(rec), flush=True)
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
