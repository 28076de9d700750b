"""tf.keras 2's `tf.keras.mixed_precision` namespace, on Keras 3 and tfmp.

Code written for tf.keras 2 runs after changing one line:

```python
from tensorflow.keras import mixed_precision   # before
from tfmp import mixed_precision               # after
```

The namespace holds exactly the four names tf.keras 2 exports there
(checked against tf_keras 2.21's `tf_keras.mixed_precision`):

* `Policy`: Keras 3's `keras.DTypePolicy` itself, so layers, `dtype=` and
  `layer.dtype_policy` all see one class. `name`, `compute_dtype`,
  `variable_dtype` and `get_config`/`from_config` are tf.keras 2's.
* `global_policy()`: the global policy, a `Policy`.
* `set_global_policy(policy)`: tf.keras 2's rules, which Keras 3's
  `keras.config.set_dtype_policy` does not follow: `None` resets to the
  `floatx()` policy, and only floating-point policies are accepted.
* `LossScaleOptimizer`: tf.keras 2's class (`tfmp.tf_keras2`): tf.keras 2's
  constructor (`dynamic`, `initial_scale`, `dynamic_growth_steps`) and
  custom-loop contract (`get_scaled_loss`, `get_unscaled_gradients`, and
  `apply_gradients` applying what it is given), on `tfmp.LossScaleOptimizer`'s
  state, bounds and exact skip. Keras 3's flow (`scale_loss`, then an
  `apply` that divides) is `tfmp.LossScaleOptimizer`'s.

Not provided, as in tf.keras 2.21: `experimental` (`experimental.Policy(name,
loss_scale)`, `experimental.set_policy`, `experimental.LossScaleOptimizer(
optimizer, loss_scale)`; removed in TensorFlow 2.9, code using it fails on
tf.keras 2 too) and `LossScaleOptimizerV3` (an internal class, never
exported: tf.keras 2.11+'s `LossScaleOptimizer(...)` returned one for its
non-legacy optimizers; this one plays that role).
tfmp's precision aliases (`fp16`, `bf16`, `auto`) are not policy names here,
as they were not in tf.keras 2; `tfmp.set_precision` takes them.

Where Keras 3 differs and this namespace cannot hide it:

* `repr(Policy("mixed_float16"))` is `<DTypePolicy "mixed_float16">`
  (tf.keras 2: `<Policy "mixed_float16">`).
* `Policy()` with no name gives a copy of the global policy (tf.keras 2
  raised `TypeError`); `Policy("_infer")` (TensorFlow 1 behaviour) raises.
* Policies compare equal by name (tf.keras 2 compared identity).
* `set_global_policy(None)` sets the policy of the current `floatx()`; a
  later `keras.config.set_floatx` does not change it (tf.keras 2 followed
  `floatx()` until a policy was set).
* Creating a mixed `Policy` does not log tf.keras 2's device compatibility
  check.
"""

from __future__ import annotations

import keras

from tfmp import precision as precision_lib
from tfmp.tf_keras2 import LossScaleOptimizer

__all__ = ["LossScaleOptimizer", "Policy", "global_policy", "set_global_policy"]

Policy = keras.DTypePolicy


def global_policy() -> Policy:
    """Returns the global dtype policy, as tf.keras 2's `global_policy()` did.

    It is the policy layers take when their constructor gets no `dtype`. If
    none was set, it is the policy of `keras.config.floatx()` (float32 by
    default).

    Returns:
        The global `Policy`.
    """
    return keras.config.dtype_policy()


def set_global_policy(policy: Policy | str | None) -> None:
    """Sets the global dtype policy, with tf.keras 2's rules.

    ```python
    mixed_precision.set_global_policy("mixed_float16")
    mixed_precision.set_global_policy(mixed_precision.Policy("mixed_float16"))
    mixed_precision.set_global_policy(None)     # back to floatx(), float32
    ```

    Args:
        policy: A `Policy`; a policy name (`"mixed_float16"`,
            `"mixed_bfloat16"`, or a floating-point dtype name such as
            `"float32"`); or `None` for the policy of
            `keras.config.floatx()`.

    Raises:
        TypeError: for a value that is neither a `Policy`, a string nor
            `None` (e.g. a `tf.DType`: pass its `.name`), as tf.keras 2 did.
        ValueError: for an unknown name, or a policy whose compute dtype is
            not floating point (`"int32"`), as tf.keras 2 did. The global
            policy is left unchanged.
    """
    if policy is None:
        policy = Policy(keras.config.floatx())
    elif not isinstance(policy, Policy):
        policy = _policy_from_name(policy)
    if not keras.backend.is_float_dtype(policy.compute_dtype):
        raise ValueError(
            "set_global_policy only takes floating-point policies, such as "
            "'float32', 'mixed_float16' or 'mixed_bfloat16'; layers cannot "
            "compute in other dtypes. Pass dtype= to the layers that need "
            f"one instead. Received: policy={policy.name!r}"
        )
    keras.config.set_dtype_policy(policy)


def _policy_from_name(name: object) -> Policy:
    """`Policy(name)`, with a hint when `name` is one of tfmp's aliases."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key in precision_lib.ALIASES or key in set(precision_lib.PRECISIONS) - set(precision_lib.CONCRETE_PRECISIONS):
        raise ValueError(
            f"{name!r} is a tfmp precision name, not a tf.keras 2 policy name. "
            "Pass 'float32', 'mixed_float16' or 'mixed_bfloat16' here, or call "
            f"tfmp.set_precision({name!r}). Received: policy={name!r}"
        )
    return Policy(name)
