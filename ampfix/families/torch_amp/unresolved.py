"""AMP013: a `<expr>.cuda.amp.<name>` / `<expr>.cpu.amp.<name>` chain whose root cannot be resolved.

The chain spells a name torch defines below a deprecated root (`autocast`, `GradScaler`, ...), but what
stands before `.cuda.amp` is not something the file's bindings explain: a parameter (`def build(th): ...
th.cuda.amp.autocast()`), an attribute of an object (`self.torch.cuda.amp.GradScaler()`), a subscript or a
call's result (`mods["t"].cuda.amp.autocast()`), a name bound to a computed value, a name a `from` import
takes out of another module (thinc's `from ..compat import torch`: torch re-exported), or a name nothing
binds. It may well be the torch module, so it is reported with the reason, never skipped and never rewritten
(the root might be something else). A module another package's import statement names (`import numpy as np`)
is that package's, not a miss; a name torch does not define below `cuda.amp` (`self.cuda.amp.level`) is
not torch's API. Suppress a report known to be wrong with `# noqa: AMP013`.
"""

from ampfix.core.rules import Example, Rule

RULE = Rule(
    code="AMP013",
    title="deprecated path below an unresolved root",
    min_torch=None,
    symbols={},
    examples=(
        Example("def build(th, enabled):\n    return th.cuda.amp.autocast(enabled)\n", reported="AMP013"),
        Example("class M:\n    def f(self):\n        return self.torch.cuda.amp.GradScaler()\n", reported="AMP013"),
        Example('scaler = mods["t"].cuda.amp.GradScaler()\n', reported="AMP013"),
        Example("from thinc.compat import torch\nscaler = torch.cuda.amp.GradScaler()\n", reported="AMP013"),
        # Another package's chain, and a name torch does not define there: not torch's API.
        Example("import numpy as np\nx = np.cuda.amp.autocast()\n"),
        Example("class M:\n    def f(self):\n        return self.cuda.amp.level\n"),
    ),
)
