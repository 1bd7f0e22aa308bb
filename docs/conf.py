"""Sphinx configuration of bdlkit's documentation site (``make docs``).

The pages are the Markdown files of this folder (MyST); the API reference is generated
from the docstrings by autodoc, with napoleon reading their Google-style ``Args:``
sections. The build is strict: ``make docs`` runs ``sphinx-build -W -n`` (every warning,
and every cross-reference that does not resolve, fails it) and needs no network
(no intersphinx; external names are listed in :data:`nitpick_ignore_regex`).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import bdlkit  # noqa: E402

project = "bdlkit"
author = "the bdlkit developers"
copyright = "2026, the bdlkit developers"
release = version = bdlkit.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: `#anchor` links to headings down to level 4, $…$ maths where a page uses it.
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]

# autodoc: members in source order, signatures without the annotations' noise repeated
# in the body; napoleon reads Google-style sections (Args:, Returns:, Raises:).
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "ignore-module-all": True}
autoclass_content = "class"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# Strict: every unresolved reference is an error, except names of other projects (the
# build has no network for intersphinx inventories) and typing constructs.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|np|arviz|zuko|pyro|matplotlib|safetensors|optree|sklearn|"
               r"scipy|yaml|tqdm|filelock|collections|typing|typing_extensions|"
               r"pathlib|os|io|json|dataclasses|enum|abc|concurrent|contextlib|"
               r"argparse|threading|logging|types|functools|numbers|warnings|inspect|csv)"
               r"(\..*)?"),
    # bare names of other projects' and Python's types, as annotations show them (exact)
    (r"py:.*", r"(Tensor|Module|Generator|Path|Callable|Iterable|Iterator|Mapping|Sequence|"
               r"Any|Literal|Optional|Union|ClassVar|Self|TypeAlias|ndarray|DataLoader|"
               r"dtype|device|NoneType|PathLike|TextIO|Protocol|"
               r"int|float|str|bool|bytes|dict|list|tuple|set|frozenset|object|type|"
               r"None|Exception|RuntimeError|ValueError|TypeError|KeyError|OSError|"
               r"UserWarning|Warning|KeyboardInterrupt|BaseException|slice|range|"
               r"callable|optional|default|array_like|sequence|iterable|mapping)"),
    # generic types that the annotation parser splits at a comma
    (r"py:class", r"'?(list|tuple|dict)\[.*"),
    # bdlkit's type aliases (``Schedule = Callable[[int], float]``): autodoc shows them by name
    (r"py:class", r"(bdlkit\.[\w.]+\.)?(Schedule|TensorTree|Params|Draw|Flat|MetaParams|"
                  r"Batch|Scalar|Leaves|Task|Where|State)"),
    (r"py:class", r"bdlkit\.core\.tree\.T"),  # the TypeVar of tree functions
]
# Napoleon reads a property's or constant's first docstring line of the form "Words: more"
# as "type: description", so such a line fails the build as an unresolved class "Words";
# write "Words — more" instead (docs/gotchas.md).

html_theme = "furo"
html_title = f"bdlkit {release}"
html_static_path: list[str] = []
html_show_sourcelink = True


def _canonical_target(name: str) -> str | None:
    """The documented (defining-module) name of a re-exported object, e.g.
    ``bdlkit.Target`` → ``bdlkit.problems.target.Target``; None if ``name`` is no object
    or one without a defining module (a constant)."""
    obj = _lookup(name)
    if isinstance(obj, type(sys)):
        return obj.__name__
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else None


def _resolve_reexport(app, env, node, contnode):
    """Resolve a reference to a re-exported or imported name at the object's defining
    module, where autodoc documents it: ``bdlkit.Result``, a package's ``__init__``
    export, or an unqualified name imported into the module whose docstring uses it."""
    if node.get("refdomain") != "py":
        return None
    name = node.get("reftarget", "").lstrip("~.")
    module = node.get("py:module") or ""
    candidates = [name] if name.startswith("bdlkit") else []
    if module.startswith("bdlkit"):
        candidates.append(f"{module}.{name}")
    domain = env.get_domain("py")
    for candidate in candidates:
        target = _canonical_target(candidate)
        if target is None or target == node["reftarget"]:
            continue
        new = node.deepcopy()
        new["reftarget"] = target
        resolved = domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                                       target, new, contnode)
        if resolved is not None:
            return resolved
    return _resolve_by_identity(app, env, node, contnode, candidates)


def _resolve_by_identity(app, env, node, contnode, candidates):
    """A constant imported into the module that mentions it (``MAX_CLASSES``) has no
    ``__module__``: find the documented object that *is* the same value."""
    objs = [obj for obj in map(_lookup, candidates)
            if obj is not None and not isinstance(obj, (str, bool))]  # interned: ambiguous
    if not objs:
        return None
    domain = env.get_domain("py")
    last = node["reftarget"].rsplit(".", 1)[-1]
    matches = [name for name in list(domain.objects) if name.rsplit(".", 1)[-1] == last
               and any(_lookup(name) is o for o in objs)]
    if len(matches) != 1:  # none, or an equal small int under the same name elsewhere
        return None
    new = node.deepcopy()
    new["reftarget"] = matches[0]
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                               matches[0], new, contnode)


def _lookup(name: str):
    """The object a dotted name denotes, or None."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # not a module, or one that fails to import: not this name
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except Exception:
            return None
        return obj
    return None


def setup(app):
    app.connect("missing-reference", _resolve_reexport)
