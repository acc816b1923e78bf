"""The layers stay layers: the sans-io ones load no trio, hypercorn or httpx, and every
import points down (a module imports its own package and the layers below, nothing above)."""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import proxai

#: Packages and modules of pure protocol logic and decisions: bytes, events and the time in.
SANS_IO = [
    "wire",
    "protocols",
    "policy",
    "translate",
    "outcome",
    "errors",
    "config",
    "config_file",
    "converters",
]
SANS_IO_MODULES = [
    "proxai.relay.ending",
    "proxai.relay.messages",
    "proxai.service.plan",
    # all but proxai.state.redis and .redis_limits, which only the redis row's open loads
    "proxai.state",
    "proxai.state.records",
    "proxai.state.memory",
    "proxai.state.store",
    "proxai.state.backends",
]
IO_LIBRARIES = ("trio", "hypercorn", "httpx", "httpcore", "anyio")


def sans_io_modules() -> list[str]:
    names = list(SANS_IO_MODULES)
    for name in SANS_IO:
        module = f"proxai.{name}"
        names.append(module)
        path = [f"{proxai.__path__[0]}/{name}"]
        names += [m.name for m in pkgutil.walk_packages(path, prefix=f"{module}.")]
    return names


@pytest.mark.parametrize("module", sans_io_modules())
def test_sans_io_module_imports_no_io_library(module: str) -> None:
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"print(' '.join(m for m in {IO_LIBRARIES!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == [], f"{module} pulls in {loaded}"


#: proxai's packages and top-level modules from the ground up; one may import those of
#: lower layers only (those of one layer stay independent of each other).
LAYERS: list[set[str]] = [
    {"converters", "outcome"},
    {"config", "errors"},  # the records everything shares
    {"wire"},
    {"protocols"},
    {"policy", "translate"},
    {"upstream", "ops", "state"},
    {"config_file", "relay"},  # config_file reads the state backends' rows
    {"service"},
    {"testing"},
    {"demo"},
    {"cli", "asgi"},
    {"__main__"},
]
LAYER_OF = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
ROOT = Path(proxai.__path__[0])


def _unit(module: str) -> str:
    """The package or top-level module of ``proxai.x.y``: ``x``."""
    return module.split(".")[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    """The proxai modules ``path`` imports (``TYPE_CHECKING`` ones too), by line."""
    parts = ["proxai", *path.relative_to(ROOT).with_suffix("").parts]
    package = parts[:-1]  # what a relative import starts from (a package's own __init__ too)
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.append((node.lineno, ".".join([*base, *filter(None, [node.module])])))
            elif node.module is not None and node.module.startswith("proxai."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("proxai.")]
    return found


def test_every_package_has_a_layer() -> None:
    units = {m.name for m in pkgutil.iter_modules(proxai.__path__)}
    assert units - set(LAYER_OF) == set(), "give each new package or module a layer"


def test_imports_point_down() -> None:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "__init__.py":
            continue
        importer = _unit(".".join(["proxai", *path.relative_to(ROOT).with_suffix("").parts]))
        for line, module in _imports(path):
            if module == "proxai" or _unit(module) == importer:
                continue
            if LAYER_OF[_unit(module)] >= LAYER_OF[importer]:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} imports {module}")
    assert upward == []


#: The modules that may name a member of ``WireApi`` or ``UpstreamKind``: where they are
#: defined, and the tables that map each member to what it means. Anywhere else a
#: member named is a branch on the protocol, which belongs in a row of the table.
TABLE_MODULES = {
    "proxai/protocols/names.py",  # WireApi
    "proxai/config.py",  # UpstreamKind, and the default of a [upstream] protocol
    "proxai/protocols/table.py",  # the rows of the APIs and the upstream kinds
    "proxai/translate/pairs.py",  # the translation pairs
    "proxai/translate/decoders/__init__.py",  # each upstream API's decoder
    "proxai/translate/encoders/__init__.py",  # each client API's encoder
    "proxai/translate/requests/__init__.py",  # each pair's request translator
    "proxai/translate/reasoning_envelopes.py",  # the APIs whose requests hold proxai's envelopes
}
PROTOCOL_ENUMS = ("WireApi", "UpstreamKind")


def _members_named(path: Path) -> list[str]:
    """Where ``path`` names a member of a protocol enum (``WireApi.CHAT``), also through
    an alias (``from ..config import UpstreamKind as Kind``)."""
    tree = ast.parse(path.read_text(), str(path))
    names = set(PROTOCOL_ENUMS)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname for a in node.names if a.name in PROTOCOL_ENUMS and a.asname}
    return [
        f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in names
        and node.attr.isupper()
    ]


def test_no_module_outside_the_table_branches_on_the_protocol() -> None:
    named = []
    for path in sorted(ROOT.rglob("*.py")):
        module = str(path.relative_to(ROOT.parent))
        if module not in TABLE_MODULES:
            named += _members_named(path)
    assert named == [], "put what depends on the protocol in a row of protocols/table.py"


#: An API endpoint's path spelled out (``"/v1/responses"``, ``b"/v1/messages"``, a regex
#: of one), as opposed to ``/v1`` itself: the table's to know.
_ENDPOINT = re.compile(r"^\^?/v1/\w")
#: Where a path may be spelled: the table, and the test helpers, which play clients and
#: upstreams (a client names the path it asks for).
PATH_MODULES = {"proxai/protocols/table.py"}


def _paths_named(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if _ENDPOINT.match(text):
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {text[:40]!r}")
    return found


def test_no_module_outside_the_table_spells_an_api_path() -> None:
    """A path literal outside the table is a branch on the protocol too (issue 37): a
    module that needs the stored responses' path or the socket's reads it from the row
    (``STORED_PATH``, ``SOCKET_API``)."""
    named = []
    for path in sorted(ROOT.rglob("*.py")):
        module = str(path.relative_to(ROOT.parent))
        if module not in PATH_MODULES and not module.startswith("proxai/testing/"):
            named += _paths_named(path)
    assert named == [], "read API paths from a row of protocols/table.py"


def _module_name(path: Path) -> str:
    parts = ["proxai", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Each proxai module's imports of proxai modules: module-level, ``TYPE_CHECKING`` and
    function-level ones alike (a lazy import is an edge the next refactor turns eager;
    a ``TYPE_CHECKING`` one is the same dependency spelled for the type checker). ``from
    . import x`` names the module ``x`` when there is one, else the package."""
    modules = {_module_name(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *filter(None, [node.module])])
                elif node.module is not None and node.module.startswith("proxai"):
                    target = node.module
                else:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges.add(sub if sub in modules else target)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.startswith("proxai.")}
        graph[name] = {m for m in edges if m in modules and m != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative:
    each is a set of modules that import each other, directly or around a loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_import_cycles_are_found() -> None:
    """The cycle finder finds a loop of three and ignores a chain (the test below must
    be able to fail)."""
    loop = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(loop) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_inside_a_package() -> None:
    """No module imports one that imports it back, however far round (issue 37): a
    circle works only by the order modules happen to load, and makes the two one
    module in all but name."""
    assert import_cycles(_import_graph()) == []


#: The modules of the Responses API's own features (storing, compaction, sockets): the
#: table's rows hold them (``Api.storing``, ``.compaction``, ``.sockets``; ``STORING``,
#: ``SOCKETS``), and code that runs requests reaches them there, never by the module.
FEATURE_MODULES = tuple(
    f"proxai.protocols.responses.{name}"
    for name in ("compaction", "history", "record", "socket", "socket_frames")
)
#: Where a feature's module may be imported besides protocols/: the halves of a feature
#: that are the API's own code (a translation's compaction answer, the upstream socket).
FEATURE_IMPORTERS = {
    "proxai/translate/pairs.py",  # the compaction a translated upstream answers
    "proxai/translate/encoders/compaction.py",
    "proxai/upstream/websocket.py",  # the Responses WebSocket's upstream half
}


def test_no_module_outside_the_table_imports_an_api_s_feature() -> None:
    """Issue 37: a feature of one API (storing, compaction, sockets) is reached through
    its row, so service code names no API's module (and a fourth API with a feature of
    its own gives its row one)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = str(path.relative_to(ROOT.parent))
        if module.startswith("proxai/protocols/") or module in FEATURE_IMPORTERS:
            continue
        for line, imported in _imports(path):
            if imported.startswith(FEATURE_MODULES):
                found.append(f"{module}:{line} imports {imported}")
    assert found == [], "reach the feature through its row in protocols/table.py"


#: Where an API's usage field may be named: its own reader, decoder and encoder, the
#: protocol table's rows (``UsageReader.key``), the test helpers; and proxai's own
#: record, whose field is called ``usage`` whatever the API's is.
USAGE_FIELD_NAMERS = (
    "proxai/protocols/",
    "proxai/translate/decoders/",
    "proxai/translate/encoders/",
    "proxai/testing/",
    "proxai/ops/request_log.py",
    "proxai/outcome.py",
)


def test_no_module_outside_an_api_names_its_usage_field() -> None:
    """Issue 37 item 3: whoever reads a whole answer's usage (the pass-through scan, the
    translator, the relay) asks the answer's API row where it is, so an API whose
    answers keep it elsewhere (Gemini's ``usageMetadata``) is one row's word."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = str(path.relative_to(ROOT.parent))
        if module.startswith(USAGE_FIELD_NAMERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in ("usage", b"usage"):
                found.append(f"{module}:{node.lineno}")
    assert found == [], "read the usage field's name from the API's row (UsageReader.key)"
