"""AMP012: a torch-version branch the declared target never runs (`ampfix.engine.planners.branches`).

Only where the target is declared (`--target-torch`, `[tool.ampfix]`, the project's metadata): at the implicit
newest torch nothing says which torch the code supports, and the branch for older torch is left.
"""

from ampfix.core.rules import Example, Rule

RULE = Rule(
    code="AMP012",
    title="outdated torch version branch",
    min_torch=None,  # a removal: nothing newer is needed
    symbols={},
    examples=(
        Example(
            "import torch\n"
            "from packaging.version import Version\n"
            "\n"
            'if Version(torch.__version__) < Version("2.4.0"):\n'
            "    custom_fwd = torch.cuda.amp.custom_fwd\n"
            "else:\n"
            '    custom_fwd = torch.amp.custom_fwd(device_type="cuda")\n',
            "import torch\n"
            "from packaging.version import Version\n"
            "\n"
            'custom_fwd = torch.amp.custom_fwd(device_type="cuda")\n',
            target_torch=(2, 4),
        ),
        # An `if` with only the branch the target never runs goes whole.
        Example(
            "import torch\n"
            "from packaging import version\n"
            "\n"
            'if version.parse(torch.__version__) < version.parse("2.0"):\n'
            "    ctx = torch.cuda.amp.autocast(True)\n"
            "x = 1\n",
            "import torch\n"
            "from packaging import version\n"
            "\n"
            "x = 1\n",
            target_torch=(2, 0),
        ),
    ),
)
