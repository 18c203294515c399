"""AMP011: deprecated names with no torch.amp twin. Always reported, never rewritten."""

from ampfix.core.rules import Example, Rule

RULE = Rule(
    code="AMP011",
    title="no torch.amp twin",
    min_torch=None,
    symbols={
        "torch.cuda.amp.amp_definitely_not_available": None,
        "torch.cuda.amp.common": None,
        "torch.cuda.amp.common.amp_definitely_not_available": None,
    },
    examples=(
        Example(
            "from torch.cuda.amp.common import amp_definitely_not_available\n"
            "ok = not amp_definitely_not_available()\n",
            reported="AMP011",
        ),
        # apex's `amp.scale_loss`: torch never had it, so nothing is suggested.
        Example("import torch\nwith torch.cuda.amp.scale_loss(loss, opt) as scaled:\n    pass\n", reported="AMP011"),
    ),
)
