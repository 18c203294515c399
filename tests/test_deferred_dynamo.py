"""torch._dynamo imported at the compiler's first use, not at the first optimizer (ampfix/runner/gpu/deferred_dynamo.py).

One child Python runs every check in order (the stand-in changes sys.modules for good): a model trained with an
optimizer while the stand-in holds, then the real compiler reached by each way a script can reach it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Three steps of a small model: what the optimizer's calls into torch._dynamo are made by.
TRAIN = textwrap.dedent(
    """
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        optimizer.step()
    """
)

CHILD = textwrap.dedent(
    """
    import sys
    import torch
    from ampfix.runner.gpu import deferred_dynamo

    deferred_dynamo.install(torch)
    stand_in = sys.modules["torch._dynamo"]
    print("installed", type(stand_in).__name__, torch._dynamo is stand_in)
    # What the runner changes in the real compiler: done once, right after the real import.
    deferred_dynamo.when_imported(lambda: print("after the import", type(sys.modules["torch._dynamo"]).__name__))

    {train}
    state = optimizer.state_dict()
    optimizer.load_state_dict(state)
    add_param_group = torch.optim.Optimizer.add_param_group.__wrapped__
    from ampfix.runner.child import process as child
    child._local_modules()  # what the runner reads of every module at the script's exit: no reason to import it
    print("trained", sys.modules["torch._dynamo"] is stand_in, add_param_group.__dict__.get("__dynamo_disable")
          is add_param_group, round(model.weight.sum().item(), 4))

    # A submodule asked for by name: the real package's own, not a second copy of it.
    import torch._dynamo.config as config
    real = sys.modules["torch._dynamo"]
    print("submodule", real is not stand_in, type(real).__name__, config is real.config,
          sys.modules["torch._dynamo.config"] is config, torch._dynamo is real)
    # The functions handed back lost their kept twin: torch's wrapper asks the real compiler again.
    print("twin dropped", "__dynamo_disable" not in add_param_group.__dict__)
    deferred_dynamo.when_imported(lambda: print("already imported: at once"))
    optimizer.add_param_group({"params": [torch.zeros(1, requires_grad=True)]})
    twin = add_param_group.__dict__.get("__dynamo_disable")
    print("twin real", twin is not None and twin is not add_param_group)
    # Read through the stand-in after the real import (a reference kept from before): the real module's answers.
    print("through", getattr(stand_in.disable(lambda: 1), "_torchdynamo_disable", None),
          stand_in.is_compiling is real.is_compiling)

    compiled = torch.compile(lambda x: x * 2 + 1, backend="eager")
    print("compiled", compiled(torch.ones(2)).tolist())
    """
).replace("{train}", TRAIN)

BEFORE_ANY_USE = textwrap.dedent(
    """
    import sys
    import torch
    from ampfix.runner.gpu import deferred_dynamo

    deferred_dynamo.install(torch)
    disabled = torch._dynamo.disable(lambda: 3)  # a script's own call: the real compiler's answer
    print(type(sys.modules["torch._dynamo"]).__name__, disabled(), getattr(disabled, "_torchdynamo_disable", None))
    """
)


def _run(code: str) -> list[str]:
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.splitlines()


def test_an_optimizer_trains_without_the_compiler_and_the_compiler_arrives_whole_when_used() -> None:
    assert _run(CHILD) == [
        "installed DeferredDynamo True",
        # The same weights as torch gives with its compiler imported (the test below computes them that way).
        f"trained True True {_weights_with_the_compiler_imported()}",
        "after the import module",
        "submodule True module True True True",
        "twin dropped True",
        "already imported: at once",
        "twin real True",
        "through True True",
        "compiled [3.0, 3.0]",
    ]


def _weights_with_the_compiler_imported() -> str:
    return _run("import torch\nimport torch._dynamo\n" + TRAIN + "print(round(model.weight.sum().item(), 4))\n")[0]


def test_a_scripts_own_disable_imports_the_real_compiler() -> None:
    assert _run(BEFORE_ANY_USE) == ["module 3 True"]
