"""AMP100-AMP109: NVIDIA apex's mixed precision (`apex.amp`, `apex.fp16_utils`, `apex.parallel`) and the
framework settings that select it. apex deprecated these in 2022 and deleted them in 2025, so code using
them fails to import on current apex. Reported, with the reason and the native pattern where one exists;
`ampfix.families.apex.detect` finds the uses (names resolved through the file's imports, as for torch's names).

None of these names has a drop-in twin: a native migration changes more than a name (a GradScaler to
create, a forward pass to put under autocast), so each rule's symbols map to None.
"""

from __future__ import annotations

from dataclasses import dataclass

from ampfix.core.rules import Example, Rule, longest_prefix
from ampfix.families.torch_amp import grad_scaler
from ampfix.syntax.prefilter import ApexSpellings, mentions_apex

# What `rewrite` does with the names of the O1 training pattern (`ampfix.families.apex.rewrite`).
PATTERN_FIX = "the O1 training pattern (README: leaving apex); else report only"
# The oldest torch that pattern's rewrite runs on: torch.amp.GradScaler(device)'s, AMP002's minimum torch (the
# minimum torch of the rules whose names it rewrites, weighed against --target-torch where every rule's is
# (`ModuleContext.hold_back`)).
PATTERN_MIN_TORCH = grad_scaler.RULE.min_torch

# The packages whose imports can reach the names below.
PACKAGES = ("apex", "mmengine")
# apex's mixed precision module: what the O1 pattern's rewrite replaces, imported as `from apex import amp`.
AMP_MODULE = "apex.amp"


@dataclass(frozen=True)
class Native:
    """torch's native AMP, which the O1 training pattern becomes: qualified names, which the rewrite spells through
    the file's own binding of `package`."""

    package: str
    grad_scaler: str
    autocast: str
    dtype: str  # the autocast dtype apex's O1 meant (float16; on the CPU the engine's family says its twin)
    scaler: str  # the name the rewrite binds the GradScaler to


NATIVE = Native(package="torch", grad_scaler="torch.amp.GradScaler", autocast="torch.autocast", dtype="torch.float16",
                scaler="scaler")

AUTOCAST = f'{NATIVE.autocast}("cuda", dtype={NATIVE.dtype})'
SCALER = f'{NATIVE.scaler} = {NATIVE.grad_scaler}("cuda")'
# What apex.amp.master_params(optimizer) iterated: every parameter of the optimizer's param_groups.
OPTIMIZER_PARAMS_OF = '(p for group in {optimizer}.param_groups for p in group["params"])'
OPTIMIZER_PARAMS = OPTIMIZER_PARAMS_OF.format(optimizer="optimizer")


@dataclass(frozen=True)
class Advice:
    """Why a name must go, and the native pattern to use by hand (None: there is none)."""

    reason: str
    native: str | None = None


OPTIONAL_IMPORT = Rule(
    code="AMP100",
    title="apex.amp import",
    min_torch=PATTERN_MIN_TORCH,
    symbols={AMP_MODULE: None},
    fix_note=PATTERN_FIX,
    examples=(
        # The optional import: on current apex the handler runs and training silently stays in float32.
        Example("try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n", reported="AMP100"),
        Example("import apex.amp\n", reported="AMP100"),
        # A dynamic import by name: no rewrite moves it, reported at its line (its uses are reported at theirs).
        Example("import importlib\namp = importlib.import_module('apex.amp')\n", reported="AMP100"),
        # A probe by name answers False on current apex: the apex path it guards silently goes dead.
        Example("from importlib.util import find_spec\nAPEX_AVAILABLE = find_spec('apex.amp') is not None\n",
                reported="AMP100"),
        # The optional import with its flag, part of the O1 training pattern: removed, the flag always True.
        Example("try:\n    from apex import amp\nexcept ImportError:\n    amp = None\nuse_amp = amp is not None\n\n\n"
                "def train(model, opt, x):\n    if use_amp:\n        model, opt = amp.initialize(model, opt)\n"
                "    loss = model(x)\n    if use_amp:\n        with amp.scale_loss(loss, opt) as scaled:\n"
                "            scaled.backward()\n    else:\n        loss.backward()\n    opt.step()\n",
                "import torch\nuse_amp = True\n\n\ndef train(model, opt, x):\n"
                "    scaler = torch.amp.GradScaler(\"cuda\", enabled=use_amp)\n"
                "    with torch.autocast(\"cuda\", dtype=torch.float16, enabled=use_amp):\n        loss = model(x)\n"
                "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"),
        # apex's optimizers and normalization layers still exist: nothing to report.
        Example("from apex.optimizers import FusedAdam\nopt = FusedAdam(params)\n"),
    ),
)

INITIALIZE = Rule(
    code="AMP101",
    title="apex.amp.initialize",
    min_torch=PATTERN_MIN_TORCH,
    symbols={"apex.amp.initialize": None, "apex.amp.frontend.initialize": None},
    fix_note=PATTERN_FIX,
    examples=(
        # The O1 training pattern, rewritten whole (`ampfix.families.apex.rewrite`).
        Example("from apex import amp\n\n\ndef train(model, opt, x):\n    model, opt = amp.initialize(model, opt)\n"
                "    loss = model(x)\n    with amp.scale_loss(loss, opt) as scaled:\n        scaled.backward()\n"
                "    opt.step()\n",
                "import torch\n\n\ndef train(model, opt, x):\n    scaler = torch.amp.GradScaler(\"cuda\")\n"
                "    with torch.autocast(\"cuda\", dtype=torch.float16):\n        loss = model(x)\n"
                "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"),
        # At module level without a step: not the pattern, reported.
        Example("from apex import amp\nmodel, opt = amp.initialize(model, opt, opt_level='O1')\n", reported="AMP101"),
        Example("import apex\nmodel, opt = apex.amp.initialize(model, opt, opt_level='O2',\n"
                "                                   keep_batchnorm_fp32=True, loss_scale=128.0)\n",
                reported="AMP101"),
    ),
)

SCALE_LOSS = Rule(
    code="AMP102",
    title="apex.amp.scale_loss",
    min_torch=PATTERN_MIN_TORCH,
    symbols={"apex.amp.scale_loss": None, "apex.amp.handle.scale_loss": None},
    fix_note=PATTERN_FIX,
    examples=(
        Example("from apex import amp\ndef train(loss, opt):\n"
                "    with amp.scale_loss(loss, opt) as scaled:\n        scaled.backward()\n", reported="AMP102"),
        Example("from apex.amp import scale_loss\n"
                "with scale_loss(loss, opt, loss_id=1) as scaled:\n    scaled.backward()\n", reported="AMP102"),
    ),
)

MASTER_PARAMS = Rule(
    code="AMP103",
    title="apex.amp.master_params",
    min_torch=PATTERN_MIN_TORCH,
    symbols={"apex.amp.master_params": None},
    fix_note=PATTERN_FIX,
    examples=(
        Example("import torch\nfrom apex import amp\n"
                "torch.nn.utils.clip_grad_norm_(amp.master_params(opt), 1.0)\n", reported="AMP103"),
    ),
)

STATE = Rule(
    code="AMP104",
    title="apex.amp state_dict",
    min_torch=PATTERN_MIN_TORCH,
    symbols={"apex.amp.state_dict": None, "apex.amp.load_state_dict": None},
    fix_note=PATTERN_FIX,
    examples=(
        Example("from apex import amp\ncheckpoint = {'amp': amp.state_dict()}\n", reported="AMP104"),
    ),
)

CASTING_FUNCTIONS = Rule(
    code="AMP105",
    title="apex.amp casting functions",
    min_torch=None,
    symbols={
        "apex.amp.half_function": None,
        "apex.amp.float_function": None,
        "apex.amp.promote_function": None,
        "apex.amp.register_half_function": None,
        "apex.amp.register_float_function": None,
        "apex.amp.register_promote_function": None,
        "apex.amp.disable_casts": None,
    },
    examples=(
        Example("from apex import amp\nroi_align = amp.float_function(_ROIAlign.apply)\n", reported="AMP105"),
        Example("import torch\nfrom apex import amp\namp.register_float_function(torch, 'sigmoid')\n",
                reported="AMP105"),
    ),
)

INTERNALS = Rule(
    code="AMP106",
    title="apex.amp internals",
    min_torch=None,
    symbols={"apex.amp.lists": None, "apex.amp._amp_state": None, "apex.amp.amp": None},
    examples=(
        Example("from apex import amp\namp.lists.functional_overrides.FP32_FUNCS.append('softplus')\n",
                reported="AMP106"),
        Example("from apex.amp._amp_state import _amp_state\nscale = _amp_state.loss_scalers[0].loss_scale()\n",
                reported="AMP106"),
    ),
)

FP16_UTILS = Rule(
    code="AMP107",
    title="apex.fp16_utils",
    min_torch=None,
    symbols={"apex.fp16_utils": None},
    examples=(
        Example("from apex.fp16_utils import FP16_Optimizer\n"
                "optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)\n", reported="AMP107"),
    ),
)

# What `from apex.fp16_utils import *` binds (apex/fp16_utils/__init__.py has no __all__: its public names and
# submodules), and the one of them rewritten (`ampfix.families.apex.fp16_utils`).
FP16_MODULE = "apex.fp16_utils"
FP16_UTILS_STAR = frozenset({
    "BN_convert_float", "network_to_half", "prep_param_lists", "model_grads_to_master_grads",
    "master_params_to_model_params", "tofp16", "to_python_float", "clip_grad_norm", "convert_module",
    "convert_network", "FP16Model", "FP16_Optimizer", "LossScaler", "DynamicLossScaler", "fp16util",
    "fp16_optimizer", "loss_scaler"})
TO_PYTHON_FLOAT_NAME = "to_python_float"
TO_PYTHON_FLOAT = ("apex's to_python_float(t) was t.item() for a tensor (t[0] for what has no item(): a list, a "
                   "tuple), and the argument is not proven a tensor")

PARALLEL = Rule(
    code="AMP108",
    title="apex.parallel",
    min_torch=None,
    symbols={"apex.parallel": None},
    examples=(
        Example("import apex\nreducer = apex.parallel.Reducer(model)\n", reported="AMP108"),
        Example("from apex.parallel.LARC import LARC\noptimizer = LARC(optimizer)\n", reported="AMP108"),
        Example("import importlib.util\nHAS_APEX_DDP = importlib.util.find_spec('apex.parallel') is not None\n",
                reported="AMP108"),
    ),
)

PARALLEL_FIX = ("where the module imports torch and the names come from `from apex.parallel import ...`; else "
                "report only")

DISTRIBUTED = Rule(
    code="AMP110",
    title="apex.parallel.DistributedDataParallel",
    min_torch=None,
    symbols={"apex.parallel.DistributedDataParallel": None, "apex.parallel.distributed.DistributedDataParallel": None},
    fix_note=PARALLEL_FIX + " (the local rank in scope: a `local_rank` name, or an `X.local_rank` read there)",
    examples=(
        # The local rank in scope: torch's DDP on this process's GPU.
        Example("import torch\nfrom apex.parallel import DistributedDataParallel\n\n\ndef wrap(model, local_rank):\n"
                "    return DistributedDataParallel(model)\n",
                "import torch\n\n\ndef wrap(model, local_rank):\n"
                "    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])\n"),
        # No local rank in scope: reported with the suggestion.
        Example("import torch\nfrom apex.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
                reported="AMP110"),
        # apex's communication options have no twin: reported.
        Example("import torch\nfrom apex.parallel import DistributedDataParallel\nlocal_rank = 0\n"
                "model = DistributedDataParallel(model, delay_allreduce=True)\n", reported="AMP110"),
    ),
)

SYNC_BATCH_NORM = Rule(
    code="AMP111",
    title="apex.parallel sync batch norm",
    min_torch=None,
    symbols={"apex.parallel.convert_syncbn_model": None, "apex.parallel.SyncBatchNorm": None,
             "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm": None},
    fix_note=PARALLEL_FIX,
    examples=(
        Example("import torch\nfrom apex.parallel import convert_syncbn_model\nmodel = convert_syncbn_model(model)\n",
                "import torch\nmodel = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"),
        Example("import torch\nfrom apex import parallel\nbn = parallel.SyncBatchNorm(64, channel_last=True)\n",
                reported="AMP111"),
    ),
)

# apex.parallel's names and what they become (`ampfix.families.apex.parallel`): the torch name, the keywords kept
# as they are (apex's and torch's share them), and how many leading positional arguments mean the same.
PARALLEL_TWINS: dict[str, tuple[str, frozenset[str], int]] = {
    "apex.parallel.DistributedDataParallel": ("torch.nn.parallel.DistributedDataParallel", frozenset(), 1),
    "apex.parallel.distributed.DistributedDataParallel": ("torch.nn.parallel.DistributedDataParallel", frozenset(), 1),
    "apex.parallel.convert_syncbn_model": ("torch.nn.SyncBatchNorm.convert_sync_batchnorm",
                                           frozenset({"process_group"}), 2),
    "apex.parallel.SyncBatchNorm": ("torch.nn.SyncBatchNorm", frozenset(
        {"num_features", "eps", "momentum", "affine", "track_running_stats", "process_group"}), 6),
    "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm": ("torch.nn.SyncBatchNorm", frozenset(
        {"num_features", "eps", "momentum", "affine", "track_running_stats", "process_group"}), 6),
}
# apex's `delay_allreduce=True`, dropped under --unsafe-fixes: what torch's DDP does instead.
DELAY_ALLREDUCE = ("torch's DDP averages the same gradients, overlapping the "
                   "allreduce with the backward where apex waited for its end; a model with parameters a forward "
                   "pass leaves unused needs find_unused_parameters=True, which apex's delayed allreduce did not")
LOCAL_RANK = "local_rank"  # the name (or attribute) that holds this process's GPU index, by convention and launchers

FRAMEWORK_CONFIG = Rule(
    code="AMP109",
    title="framework set to use apex",
    min_torch=None,
    symbols={
        "mmengine.optim.ApexOptimWrapper": None,
        "mmengine.optim.optimizer.ApexOptimWrapper": None,
        "mmengine.optim.optimizer.apex_optimizer_wrapper.ApexOptimWrapper": None,
    },
    examples=(
        Example("import pytorch_lightning as pl\ntrainer = pl.Trainer(precision=16, amp_backend='apex')\n",
                reported="AMP109"),
        Example("optim_wrapper = dict(type='ApexOptimWrapper', opt_level='O1')\n", reported="AMP109"),
        Example("ds_config = {'train_batch_size': 8, 'amp': {'enabled': True, 'opt_level': 'O1'}}\n",
                reported="AMP109"),
        # The same keyword selecting native AMP is not apex.
        Example("trainer = Trainer(precision=16, amp_backend='native')\n"),
    ),
)

APEX_RULES: tuple[Rule, ...] = (OPTIONAL_IMPORT, INITIALIZE, SCALE_LOSS, MASTER_PARAMS, STATE, CASTING_FUNCTIONS,
                                INTERNALS, FP16_UTILS, PARALLEL, FRAMEWORK_CONFIG, DISTRIBUTED, SYNC_BATCH_NORM)

# Each rule by the names it lists (the longest listed prefix of a use's qualified name decides).
_RULE_OF_NAME: dict[str, Rule] = {name: rule for rule in APEX_RULES for name in rule.symbols}


def under_amp(qname: str) -> bool:
    """`qname` is apex.amp or a name below it (a module path or a resolved use)."""
    return qname == AMP_MODULE or qname.startswith(AMP_MODULE + ".")


def rule_of(qname: str) -> Rule | None:
    """The apex rule whose names `qname` lies under, or None."""
    name = longest_prefix(_RULE_OF_NAME, qname)
    return None if name is None else _RULE_OF_NAME[name]


REMOVED = "removed from apex in 2025"
# The keys of a checkpoint's loss scaler state: apex.amp.state_dict()'s, and GradScaler.state_dict()'s.
APEX_STATE_KEYS = "{'loss_scaler0': {'loss_scale', 'unskipped'}}"
SCALER_STATE_KEYS = "{'scale', 'growth_factor', 'backoff_factor', 'growth_interval', '_growth_tracker'}"

# What to say of each name (the longest listed prefix of a use's qualified name decides).
ADVICE: dict[str, Advice] = {
    "apex.amp": Advice(f"`apex.amp` was {REMOVED}",
                       f"{AUTOCAST} around the forward pass and loss, and a {NATIVE.grad_scaler}(\"cuda\")"),
    "apex.amp.initialize": Advice(
        f"`apex.amp.initialize` was {REMOVED}",
        f"{SCALER}; {AUTOCAST} around every forward pass and loss (training and evaluation)"),
    "apex.amp.scale_loss": Advice(f"`apex.amp.scale_loss` was {REMOVED}",
                                  "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()"),
    "apex.amp.master_params": Advice(
        f"`apex.amp.master_params` was {REMOVED}; it iterated the optimizer's param_groups, and clipping must "
        "see unscaled gradients: unscale once per optimizer step, after the last micro-step's backward",
        f"scaler.unscale_(optimizer); torch.nn.utils.clip_grad_norm_({OPTIMIZER_PARAMS}, max_norm)"),
    "apex.amp.state_dict": Advice(
        f"`apex.amp.state_dict` was {REMOVED}; the formats differ (apex: {APEX_STATE_KEYS}, GradScaler: "
        f"{SCALER_STATE_KEYS}), so old checkpoints need their key handled",
        "scaler.state_dict()"),
    "apex.amp.load_state_dict": Advice(
        f"`apex.amp.load_state_dict` was {REMOVED}; the formats differ (apex: {APEX_STATE_KEYS}, "
        "GradScaler: {'scale', ...}): an old checkpoint's loss scale is "
        "state['loss_scaler0']['loss_scale']",
        "scaler.load_state_dict(state)"),
    "apex.amp.float_function": Advice(
        f"`apex.amp.float_function` was {REMOVED}; it cast the inputs to float32 and ran the function outside "
        "mixed precision",
        '@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32) on an autograd.Function\'s forward '
        "(with @torch.amp.custom_bwd(device_type=\"cuda\") on its backward); elsewhere, call it under "
        'torch.autocast("cuda", enabled=False) with float32 inputs'),
    "apex.amp.half_function": Advice(
        f"`apex.amp.half_function` was {REMOVED}; it cast the inputs to float16",
        '@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float16) on an autograd.Function\'s forward'),
    "apex.amp.promote_function": Advice(
        f"`apex.amp.promote_function` was {REMOVED}; autocast has no user-level promote list",
        "cast the inputs to a common dtype before the call"),
    "apex.amp.register_half_function": Advice(
        f"`apex.amp.register_*_function` was {REMOVED}; torch.autocast's op lists cannot be edited",
        'wrap the calls: with torch.autocast("cuda", enabled=False): f(x.float()) (float32), '
        "or cast the inputs to float16 before the call"),
    "apex.amp.disable_casts": Advice(f"`apex.amp.disable_casts` was {REMOVED}",
                                     'with torch.autocast("cuda", enabled=False):'),
    "apex.amp.lists": Advice(f"`apex.amp.lists` was {REMOVED}; torch.autocast's op lists cannot be edited",
                             'wrap the calls: with torch.autocast("cuda", enabled=False): f(x.float())'),
    "apex.amp._amp_state": Advice(f"apex's private amp state was {REMOVED}; GradScaler keeps its own",
                                  "scaler.get_scale()"),
    "apex.amp.amp": Advice(f"apex's private amp handle was {REMOVED}; nothing native replaces it"),
    "apex.fp16_utils": Advice(
        f"`apex.fp16_utils` was {REMOVED}; it kept float32 master weights for a float16 model (like O2), which "
        "native AMP does not: the model stays float32 under autocast",
        f"{SCALER}; {AUTOCAST} around the forward pass and loss"),
    "apex.parallel": Advice(f"`apex.parallel` was {REMOVED}",
                            "torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank]) "
                            "(apex's delay_allreduce and message_size have no twin)"),
    "apex.parallel.SyncBatchNorm": Advice(f"`apex.parallel.SyncBatchNorm` was {REMOVED}",
                                          "torch.nn.SyncBatchNorm"),
    "apex.parallel.convert_syncbn_model": Advice(f"`apex.parallel.convert_syncbn_model` was {REMOVED}",
                                                 "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)"),
    "mmengine.optim.ApexOptimWrapper": Advice(
        "mmengine's ApexOptimWrapper needs apex.amp, " + REMOVED, "mmengine.optim.AmpOptimWrapper"),
}
ADVICE["apex.parallel.optimized_sync_batchnorm.SyncBatchNorm"] = ADVICE["apex.parallel.SyncBatchNorm"]
# `register_half_function(torch, "einsum")` where autocast runs the function in float16 already: what is suggested
REGISTER_HALF = "apex.amp.register_half_function"
FLOAT16_REGISTRATION = ("nothing: torch.{name} is on CUDA autocast's float16 list, so under the autocast of the "
                        "migration it runs in float16 already; the registration goes with apex.amp's set-up (ampfix "
                        "removes it where it rewrites that set-up)")
for _name in ("register_float_function", "register_promote_function"):
    ADVICE[f"apex.amp.{_name}"] = ADVICE["apex.amp.register_half_function"]
ADVICE["apex.amp.handle.scale_loss"] = ADVICE["apex.amp.scale_loss"]
ADVICE["apex.amp.frontend.initialize"] = ADVICE["apex.amp.initialize"]
for _name in ("mmengine.optim.optimizer.ApexOptimWrapper",
              "mmengine.optim.optimizer.apex_optimizer_wrapper.ApexOptimWrapper"):
    ADVICE[_name] = ADVICE["mmengine.optim.ApexOptimWrapper"]

# apex's private loss scalers (`amp._amp_state.loss_scalers[0]`) and the reads of their scale that become the
# GradScaler's `get_scale()`.
LOSS_SCALERS = "apex.amp._amp_state.loss_scalers"
LOSS_SCALE_READS = frozenset({"_loss_scale", "loss_scale"})
# The settings of apex's dynamic loss scaler a script may write through `loss_scalers[0]` (DeepLearningExamples'
# GNMT), and the GradScaler argument each one is: apex's LossScaler (apex/amp/scaler.py at eae1ddf1) starts at
# `_loss_scale`, doubles it after `_scale_seq_len` clean updates and halves it on inf/NaN, as a GradScaler does from
# `init_scale` after `growth_interval` clean updates with its default factors (2.0, 0.5).
LOSS_SCALER_SETTINGS = {"_loss_scale": "init_scale", "_scale_seq_len": "growth_interval"}

# An attribute apex set on optimizers it wrapped (`optimizer._amp_stash`); reported in files importing apex.
AMP_STASH = "_amp_stash"
AMP_STASH_ADVICE = Advice(f"`{AMP_STASH}` is apex's private optimizer state, {REMOVED}",
                          "scaler.get_scale() / scaler.state_dict()")

# Settings that select apex inside other frameworks: keyword (or dict key) -> value, and the native choice.
CONFIG_SETTINGS: dict[tuple[str, str], Advice] = {
    ("amp_backend", "apex"): Advice("PyTorch Lightning's amp_backend='apex' needs apex.amp, " + REMOVED,
                                    "precision='16-mixed' without amp_backend"),
    ("amp_mode", "apex"): Advice("ignite's amp_mode='apex' needs apex.amp, " + REMOVED, "amp_mode='amp'"),
    ("type", "ApexOptimWrapper"): Advice("mmengine's ApexOptimWrapper needs apex.amp, " + REMOVED,
                                         "type='AmpOptimWrapper'"),
}
# DeepSpeed's config key whose section runs apex.amp.
DEEPSPEED_AMP_KEY = "amp"
_DEEPSPEED_KEY_QUOTED = (f'"{DEEPSPEED_AMP_KEY}"', f"'{DEEPSPEED_AMP_KEY}'")
DEEPSPEED_ADVICE = Advice("DeepSpeed's \"amp\" section runs apex.amp, " + REMOVED,
                          "\"fp16\": {\"enabled\": true} (or \"bf16\") in place of \"amp\"")

# What a use of these names spells beside `apex`, for the pre-filter (`ampfix.syntax.prefilter`): below apex, the
# removed module each rule's names lie in; elsewhere (mmengine), the name itself; apex's optimizer attribute; the
# settings' values.
SPELLINGS = ApexSpellings(
    modules=tuple(sorted({symbol.split(".")[1] for rule in APEX_RULES for symbol in rule.symbols
                          if symbol.split(".")[0] == "apex"})),
    names=tuple(sorted({symbol.rpartition(".")[2] for rule in APEX_RULES for symbol in rule.symbols
                        if symbol.split(".")[0] != "apex"} | {AMP_STASH})),
    values=tuple(sorted({value for _, value in CONFIG_SETTINGS})),
)


def may_hold_use(text: str) -> bool:
    """False only where the apex planner (`ampfix.families.apex.detect`) can find nothing in a module of this text,
    so that `check` of a module without apex never imports it (a third of the modules a `check` imports). Every use
    it reports is reached through a name, string or setting that spells `apex` or `Apex`, except DeepSpeed's
    "amp" key (quoted); a text that is not ASCII is read whatever it spells (an identifier is compared as its NFKC
    form, which the text need not spell). A setting's value written with escapes (`"\\x61pex"`) is not read, as the
    pre-filter (`ampfix.syntax.prefilter`) does not keep its file either."""
    return mentions_apex(text) or not text.isascii() or any(key in text for key in _DEEPSPEED_KEY_QUOTED)


LOAD_STATE = "apex.amp.load_state_dict"
# `amp.load_state_dict(state)` -> `scaler.load_state_dict(<helper>(state))`, the helper added once at module level
# (its name clash-free): a checkpoint written by apex.amp.state_dict() loads into the GradScaler. apex's dynamic
# scaler is the GradScaler's defaults (x2 after 2000 clean steps, /2 on overflow), and its count of clean steps
# since the scale last changed (`unskipped`) is the GradScaler's growth tracker. `{name}`, `{nl}`: the helper's
# name and the file's line ending.
SCALER_STATE_HELPER_NAME = "grad_scaler_state"
SCALER_STATE_HELPER = (
    "def {name}(state):{nl}"
    '    """`state` for GradScaler.load_state_dict, also when apex.amp.state_dict() wrote it."""{nl}'
    '    if "loss_scaler0" not in state:{nl}'
    "        return state{nl}"
    '    apex = state["loss_scaler0"]{nl}'
    '    return {{"scale": apex["loss_scale"], "growth_factor": 2.0, "backoff_factor": 0.5, '
    '"growth_interval": 2000,{nl}'
    '            "_growth_tracker": apex["unskipped"]}}{nl}'
)

# The evaluation idiom: a `with` block under one of these, after initialize in its function, ran in O1's mixed
# precision; the rewrite adds the autocast to it, unless one of the others already is an item of that `with`.
EVALUATION_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode"})
AUTOCAST_CONTEXTS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
                               "torch.cpu.amp.autocast"})

# torch's gradient clipping: between a backward and its step it reads gradients apex had unscaled and a
# GradScaler has not yet, so the rewrite puts `scaler.unscale_(optimizer)` before it.
# The methods of a model (torch.nn.Module) or an optimizer that read no gradient: any other one called between a
# backward and its step may (FSDP's `model.clip_grad_norm_`, a wrapper's `optimizer.clip_grad_norm`).
METHODS_NOT_READING_GRADIENTS = frozenset({"step", "zero_grad", "train", "eval", "parameters", "named_parameters",
                                           "modules", "named_modules", "children", "state_dict"})
# The methods of torch.nn.Module (and FSDP's `clip_grad_norm_`) that run no forward pass: a call of any other
# method of the model after initialize (a project's `model.evaluate(dev)`, `model.forward_loss(batch)`,
# `model.predict(x)`) may run it, as a call of the model does; O1 ran it in float16, so outside the autocast the
# rewrite adds it is named in initialize's finding.
MODULE_METHODS_WITHOUT_FORWARD = frozenset({
    "train", "eval", "zero_grad", "parameters", "named_parameters", "buffers", "named_buffers", "modules",
    "named_modules", "children", "named_children", "state_dict", "load_state_dict", "to", "cuda", "cpu", "half",
    "float", "double", "bfloat16", "type", "requires_grad_", "add_module", "register_module", "register_buffer",
    "register_parameter", "register_forward_hook", "register_forward_pre_hook", "register_backward_hook",
    "register_full_backward_hook", "get_submodule", "get_parameter", "get_buffer", "extra_repr", "share_memory",
    "apply", "clip_grad_norm_"})
# The flag under which imports are for type checkers only: its `if` never runs.
TYPE_CHECKING = "typing.TYPE_CHECKING"
# A backward not through scale_loss: `torch.autograd.backward(tensors)`, or any `<tensor>.backward()`.
PLAIN_BACKWARD = frozenset({"torch.autograd.backward"})
BACKWARD_METHOD = "backward"
GRADIENT_CLIPPING = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
                               "torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad.clip_grad_norm_",
                               "torch.nn.utils.clip_grad.clip_grad_value_"})

# apex.amp.initialize(models, optimizers=None, enabled=True, opt_level="O1", cast_model_type=None, ...)
INITIALIZE_PARAMS = ("models", "optimizers", "enabled", "opt_level", "cast_model_type", "patch_torch_functions",
                     "keep_batchnorm_fp32", "master_weights", "loss_scale")
INITIALIZE_DEFAULT_OPT_LEVEL = "O1"
# The opt_level native autocast reproduces (the only one the rewrite takes), and the loss_scale that is a
# GradScaler's own (apex's default: dynamic scaling).
NATIVE_OPT_LEVEL = "O1"
DYNAMIC_LOSS_SCALE = "dynamic"
# The initialize keywords whose meaning the rewrite keeps: `enabled` goes to the scaler and autocast, the others
# are O1's defaults or logging.
PATTERN_KEYWORDS = frozenset({"opt_level", "enabled", "verbosity", "loss_scale"})
# The keywords that make an initialize call more than O1 (what native autocast does), and why.
INITIALIZE_KEYWORDS: dict[str, str] = {
    "cast_model_type": "cast_model_type casts the model's weights (O2/O3): native AMP keeps them float32",
    "keep_batchnorm_fp32": "keep_batchnorm_fp32 belongs to a model cast to float16 (O2/O3): native AMP keeps "
                           "every weight float32",
    "master_weights": "master_weights keeps float32 copies of float16 weights (O2): native AMP has none to keep",
    "patch_torch_functions": "patch_torch_functions selects O1's patching explicitly: native autocast is scoped",
    "min_loss_scale": "min_loss_scale: GradScaler has no floor for its scale",
    "max_loss_scale": "max_loss_scale: GradScaler has no ceiling for its scale",
    "num_losses": "num_losses gives each loss its own scale: one GradScaler serves every loss with one scale",
}
# What mapping several losses (`num_losses`, `loss_id`) onto one GradScaler changes (the note of that unsafe rewrite).
SEVERAL_LOSSES = ("num_losses/loss_id become one GradScaler for every loss (PyTorch's pattern: scale() each loss, "
                  "one step per optimizer, one update per iteration): apex kept a loss scale per loss, the one "
                  "scale is bounded by the loss whose gradients overflow first, so a loss with small gradients is "
                  "scaled less than apex scaled it")
# A scale_loss given one of several optimizers (a GAN's alternating steps): one GradScaler, what changes.
ONE_OF_SEVERAL_OPTIMIZERS = (
    "a scale_loss is given one of initialize's optimizers (a GAN's alternating steps): apex unscaled only that "
    "optimizer's gradients when scale_loss exited; the one GradScaler unscales each optimizer's gradients at its "
    "step, so gradients a backward leaves in another optimizer's parameters (the discriminator's, from the "
    "generator's loss) are unscaled at that optimizer's next step, where apex added them still scaled: the same "
    "only where they are zeroed before (`zero_grad()` before each backward, as apex's DCGAN example does)")
# The keywords that belong to O2/O3 (float16 weights): nothing to map where native AMP keeps float32 weights, so
# an unsafe rewrite drops them, each named in the finding (INITIALIZE_KEYWORDS says why).
UNSAFE_KEYWORDS = frozenset({"keep_batchnorm_fp32", "master_weights"})
# What an O2/O3 run loses when it becomes native AMP (the note of an unsafe or option-read rewrite).
OPT_LEVEL_LOSS = ("O2 and O3 cast the model to float16 (O2 with float32 master copies of the weights); native AMP "
                  "keeps float32 weights and runs the forward pass under autocast: the numerics and the memory use "
                  "change (NVIDIA's deprecation notice points O1 and O2 users to native AMP)")
# What an O0 run loses, where a level that is not a literal may be O0 (no choices, or choices that list it).
O0_LOSS = ("O0 is plain float32 (loss scale 1): a run that sets it now gets float16 autocast and a dynamic loss "
           "scale, unless the scaler and autocast are given `enabled=False` for it")
# A static `loss_scale=N`: its nearest GradScaler (init_scale=N, a growth interval never reached), and what differs.
NEVER_GROWS = 2**31 - 1  # the largest growth interval GradScaler's int32 tracker counts to
STATIC_LOSS_SCALE = ("a static loss scale becomes a GradScaler that starts at it and never grows it (growth_interval "
                     f"{NEVER_GROWS}); apex's static scale stepped on inf/NaN gradients, the GradScaler skips that "
                     "step and halves its scale, which then stays lower (GradScaler has no fixed scale: its growth "
                     "and backoff factors must differ from 1)")
# Where the project declares its level (`--apex-opt-level`, `apex-opt-level` in [tool.ampfix]) and the code reads it
# from elsewhere: what the finding says the declaration decided.
DECLARED_O1 = ("declared O1 (--apex-opt-level): autocast and a GradScaler, as O1 ran; a run that passes another "
               "level than the declared one is not what was rewritten")
DECLARED_O2 = (f"declared O2 (--apex-opt-level) becomes native AMP: {OPT_LEVEL_LOSS}; keep_batchnorm_fp32 and the "
               "float32 master weights have no native twin (every weight stays float32)")
DECLARE_THE_LEVEL = ("the project may declare the level it runs: --apex-opt-level O1|O2 (apex-opt-level in "
                     "[tool.ampfix])")
UNSAFE_OPT_LEVELS: dict[str, str] = {
    "O2": f"opt_level O2 becomes native AMP: {OPT_LEVEL_LOSS}",
    "O3": f"opt_level O3 (pure float16, no master weights) becomes native AMP: {OPT_LEVEL_LOSS}",
}
OPT_LEVELS: dict[str, str] = {
    "O1": "O1 patched torch for the whole process from here on; autocast is scoped, so every forward pass "
          "(evaluation too) must be under it",
    "O0": "O0 is plain float32: remove initialize and scale_loss, no scaler is needed",
    "O2": "O2 casts the model to float16 and keeps float32 master weights: native autocast (O1) changes the "
          "numerics, so the choice is a person's",
    "O3": "O3 is pure float16: native autocast (O1) changes the numerics, so the choice is a person's",
}


__all__ = ["ADVICE", "APEX_RULES", "Advice", "PACKAGES", "rule_of"]
