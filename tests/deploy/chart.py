"""Render the Helm chart with the helm that ``make cluster-build`` builds, and read what the
controller asks of the API (the source of truth for the chart's RBAC).

Shared by the unit tests here and tests/cluster/test_deploy_manifests.py.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from queue_controller.kube import gateway as gw
from queue_controller.kube import kinds as workload_kinds

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "queue-controller"
HELM = ROOT / "deploy" / "local-cluster" / "bin" / "helm"
MANIFESTS = ROOT / "deploy" / "manifests" / "queue-controller.yaml"
RENDER = ROOT / "deploy" / "manifests" / "render.sh"
CONTROLLER = ROOT / "queue_controller"
Doc = dict[str, Any]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        pytest.fail(f"no helm binary at {HELM}: run make cluster-build")
    return subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, check=check, timeout=120
    )


def render(
    *sets: str, namespace: str = "queue-controller-system", release: str = "queue-controller"
) -> list[Doc]:
    """``helm template`` with ``--set`` pairs, as parsed documents (fresh ones each call)."""
    return [d for d in yaml.safe_load_all(_template(sets, namespace, release)) if d]


@cache
def _template(sets: tuple[str, ...], namespace: str, release: str) -> str:
    flags = [item for pair in sets for item in ("--set", pair)]
    return helm("template", release, str(CHART), "--namespace", namespace, *flags).stdout


def render_error(*sets: str) -> str:
    """The error of a render that must fail."""
    flags = [item for pair in sets for item in ("--set", pair)]
    result = helm("template", "queue-controller", str(CHART), *flags, check=False)
    assert result.returncode != 0, "the render succeeded"
    return result.stderr


def one(docs: Iterable[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''} objects"
    return found[0]


def container(docs: Iterable[Doc]) -> Doc:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    result: Doc = pod["containers"][0]
    return result


def env(docs: Iterable[Doc]) -> dict[str, Doc]:
    """The controller container's environment, by name."""
    return {e["name"]: e for e in container(docs)["env"]}


# -- what the controller asks of the API -------------------------------------------------

# The RBAC verb each Gateway HTTP method needs.
HTTP_VERBS = {"POST": "create", "PATCH": "patch", "DELETE": "delete"}
KINDS: dict[str, gw.Resource] = {
    name: value for name, value in vars(gw).items() if isinstance(value, gw.Resource)
}


def resource(kind: gw.Resource, subresource: str = "") -> tuple[str, str]:
    """(API group, resource[/subresource]) as RBAC names them."""
    group = kind.api_version.rpartition("/")[0]
    return group, f"{kind.plural}/{subresource}" if subresource else kind.plural


def gateway_methods() -> dict[str, tuple[set[str], gw.Resource | None]]:
    """Each Gateway method: the HTTP methods it issues, and the Kind it is fixed to, if any
    (``event`` always posts an Event)."""
    tree = ast.parse((CONTROLLER / "kube" / "gateway.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Gateway")
    methods: dict[str, tuple[set[str], gw.Resource | None]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        http: set[str] = set()
        fixed: gw.Resource | None = None
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "_request"
            ):
                method, path = node.args[0], node.args[1]
                assert isinstance(method, ast.Constant), ast.unparse(node)
                http.add(str(method.value))
                # A request to EVENT.path(...) and the like: the kind is fixed.
                if (
                    isinstance(path, ast.Call)
                    and isinstance(path.func, ast.Attribute)
                    and isinstance(path.func.value, ast.Name)
                    and path.func.value.id in KINDS
                ):
                    fixed = KINDS[path.func.value.id]
        methods[fn.name] = (http, fixed)
    return methods


@dataclass(frozen=True)
class Use:
    """One gateway call site: which method, on which kinds, with which subresource."""

    where: str
    method: str
    kinds: tuple[gw.Resource, ...]
    subresource: str


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _watched_names(tree: ast.Module) -> set[str]:
    """Names bound by ``for NAME in gw.WATCHED`` (loops and comprehensions)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.For | ast.comprehension)
            and ast.unparse(node.iter) in ("gw.WATCHED", "WATCHED", "kinds.WATCHED")
            and isinstance(node.target, ast.Name)
        ):
            names.add(node.target.id)
    return names


def gateway_uses() -> list[Use]:
    """Every call of a Gateway method in the package, with the kinds it is called on.

    A method is called directly (``gateway.list(kind)``) or handed over with its arguments
    (``self._call(self.gateway.create, gw.POD_GROUP, ...)``, ``to_thread(gateway.list,
    kind)``). A kind that is a parameter of the calling function (a wrapper such as
    ``Applier._patch``) is taken from the wrapper's own call sites, and so is a
    ``subresource`` that depends on one of its parameters. Anything else fails, so a new
    shape of call makes this reader grow rather than miss a permission.
    """
    methods = gateway_methods()
    uses: list[Use] = []
    for path in sorted(CONTROLLER.rglob("*.py")):
        if path.name == "gateway.py" and path.parent.name == "kube":
            continue
        if _operator_tool(path):
            continue
        tree = ast.parse(path.read_text())
        watched = _watched_names(tree)
        for fn in _functions(tree):
            params = [a.arg for a in fn.args.args]
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                slots = [call.func, *call.args]
                for i, slot in enumerate(slots):
                    if not (
                        isinstance(slot, ast.Attribute)
                        and slot.attr in methods
                        and ast.unparse(slot.value).split(".")[-1] == "gateway"
                    ):
                        continue
                    where = f"{path.relative_to(ROOT)}:{call.lineno}"
                    _, fixed = methods[slot.attr]
                    if fixed is not None:
                        uses.append(Use(where, slot.attr, (fixed,), ""))
                        continue
                    kind_arg = slots[i + 1] if i + 1 < len(slots) else None
                    sub_arg = next((k.value for k in call.keywords if k.arg == "subresource"), None)
                    for kinds, sub, line in _resolve(
                        kind_arg, sub_arg, params, fn, tree, watched, where
                    ):
                        at = where if line is None else f"{where} (called at line {line})"
                        uses.append(Use(at, slot.attr, kinds, sub))
    return uses


def _operator_tool(path: Path) -> bool:
    """`chaos` runs with the operator's own credentials, never the controller's service
    account: its writes (taint a node, delete one) must not widen the ClusterRole."""
    relative = path.relative_to(CONTROLLER)
    return relative.parts[0] == "chaos" or (
        relative.parts[0] == "cli" and path.name.startswith("chaos")
    )


def _resolve(
    kind_arg: ast.expr | None,
    sub_arg: ast.expr | None,
    params: list[str],
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    tree: ast.Module,
    watched: set[str],
    where: str,
) -> Iterator[tuple[tuple[gw.Resource, ...], str, int | None]]:
    def kinds_of(node: ast.expr | None) -> tuple[gw.Resource, ...] | None:
        if isinstance(node, ast.Attribute) and node.attr in KINDS:
            return (KINDS[node.attr],)
        if isinstance(node, ast.Name) and node.id in watched and node.id not in params:
            return workload_kinds.WATCHED
        # A write on a Ref (``ref.resource``): what it may name is the registry's
        # rbac_rules(), which the applier's recorded calls are checked against.
        if node is not None and ast.unparse(node).endswith(".resource"):
            return ()
        return None

    direct = kinds_of(kind_arg)
    if direct == ():
        return  # a Ref's resource: covered by the registry's rules
    if direct is not None and (sub_arg is None or isinstance(sub_arg, ast.Constant)):
        yield direct, str(sub_arg.value) if isinstance(sub_arg, ast.Constant) else "", None
        return
    # A wrapper: the kind (and maybe the subresource) come from its parameters.
    if not (isinstance(kind_arg, ast.Name) and kind_arg.id in params):
        shown = ast.unparse(kind_arg) if kind_arg is not None else "nothing"
        raise AssertionError(f"{where}: cannot tell which kind {shown!r} is")
    position = params.index(kind_arg.id) - (1 if params[:1] == ["self"] else 0)
    callers = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute | ast.Name)
        and (n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id) == fn.name
    ]
    assert callers, f"{where}: the wrapper {fn.name} is never called"
    for caller in callers:
        kinds = kinds_of(caller.args[position])
        assert kinds is not None, f"{where}: cannot tell the kind in {ast.unparse(caller)}"
        yield kinds, _subresource(sub_arg, fn, caller, where), caller.lineno


def _subresource(
    sub_arg: ast.expr | None,
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    caller: ast.Call,
    where: str,
) -> str:
    """``subresource=`` as a wrapper's caller makes it: a constant, or ``"status" if FLAG
    else ""`` with FLAG a keyword-only parameter given as a literal (or defaulted)."""
    if sub_arg is None:
        return ""
    if isinstance(sub_arg, ast.Constant):
        return str(sub_arg.value)
    unreadable = f"{where}: cannot tell the subresource {ast.unparse(sub_arg)!r}"
    assert isinstance(sub_arg, ast.IfExp), unreadable
    assert isinstance(sub_arg.test, ast.Name), unreadable
    assert isinstance(sub_arg.body, ast.Constant), unreadable
    assert isinstance(sub_arg.orelse, ast.Constant), unreadable
    flag = sub_arg.test.id
    value = next((k.value for k in caller.keywords if k.arg == flag), None)
    if value is None:
        names = [a.arg for a in fn.args.kwonlyargs]
        value = fn.args.kw_defaults[names.index(flag)]
    assert value is not None, f"{where}: {flag} has no default"
    chosen = sub_arg.body if ast.literal_eval(value) else sub_arg.orelse
    return str(chosen.value)


def required_rules() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the controller needs cluster-wide, from its code."""
    methods = gateway_methods()
    needed: set[tuple[str, str, str]] = set()
    for use in gateway_uses():
        http, _ = methods[use.method]
        for kind in use.kinds:
            group, res = resource(kind, use.subresource)
            for method in http:
                verb = (
                    ("list" if use.method == "list" else "get")
                    if method == "GET"
                    else HTTP_VERBS[method]
                )
                needed.add((group, res, verb))
    # kopf's watches (handlers.py: one @kopf.on.event per resource in kinds.WATCHED).
    for kind in workload_kinds.WATCHED:
        group, res = resource(kind)
        needed |= {(group, res, "list"), (group, res, "watch")}
    return needed | registry_rules()


def registry_rules() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the registry of workload kinds declares (kinds.rbac_rules)."""
    return {
        (rule.group, res, verb)
        for rule in workload_kinds.rbac_rules()
        for res in rule.resources
        for verb in rule.verbs
    }


# Granted beyond what the code declares, each for a reason given in rbac.yaml.
JUSTIFIED_EXTRAS: set[tuple[str, str, str]] = set()


def granted(role: Doc) -> set[tuple[str, str, str]]:
    """(group, resource, verb) a ClusterRole grants, for rules without resourceNames."""
    rules: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule, rule
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                rules |= {(group, res, verb) for verb in rule["verbs"]}
    return rules
