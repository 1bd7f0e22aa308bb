"""The folders are the architecture: every import goes to the same or a lower layer.

Layers, lowest first (docs/architecture.md): core; what is inferred and measured
(problems, families, models, data, metrics, diagnostics, the meta-learned parts of l2e and meta_sgmcmc);
algorithms; evaluation (predictive, metrics of a result); engine (runner, stores,
checkpoints, Result); runs (config, run directories, reports, reference, load); the
one-call API (infer); benchmarks; the CLI. Imports only for type checking are exempt.
"""

import ast
from pathlib import Path

import bdlkit

ROOT = Path(bdlkit.__file__).parent
LAYERS = {
    "core": 0,
    "problems": 1, "families": 1, "models": 1, "data": 1, "metrics": 1, "diagnostics": 1,
    "l2e": 1, "meta_sgmcmc": 1,
    "algorithms": 2,
    "evaluation": 3,
    "engine": 4,
    "runs": 5,
    "infer": 6, "__init__": 6,
    "bench": 7,
    "cli": 8, "cli_commands": 8, "cli_errors": 8, "cli_options": 8, "cli_stops": 8,
    "__main__": 8,
}


def _part(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else "__init__"


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names] if module == "bdlkit" else [module]
            out += [(node.lineno, m) for m in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in out if m == "bdlkit" or m.startswith("bdlkit.")]


def test_imports_only_go_downward():
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        module = ".".join(rel.parts)
        package = module.rsplit(".", 1)[0]
        here = LAYERS[_part(module)]  # a module outside every layer fails here
        for line, target in _imports(path, package):
            if LAYERS[_part(target)] > here:  # `import bdlkit` is the top-level API
                bad.append(f"{rel}.py:{line} imports {target}")
    assert bad == []


def test_the_top_level_holds_only_the_api_and_the_layers():
    loose = sorted(p.stem for p in ROOT.glob("*.py"))
    assert loose == ["__init__", "__main__", "cli", "cli_commands", "cli_errors", "cli_options",
                     "cli_stops", "infer"]
    assert set(LAYERS) >= {p.name for p in ROOT.iterdir() if p.is_dir() and
                           (p / "__init__.py").exists()}
