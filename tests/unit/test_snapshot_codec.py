"""The snapshot codec (streams.core.snapshot): values, shared references, determinism, refusal.

A snapshot is read back from a topic anyone with write access could forge, so besides round
trips these tests feed it malformed and hostile bytes: every one must raise ``SnapshotError``
with a one-line reason, and nothing outside the allow-list may ever be built.
"""

from __future__ import annotations

import array
import json
import math
import os
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams.core import objgraph as G
from streams.core import snapshot as S
from streams.core.decide import Lineage
from streams.core.errors import CoreError
from streams.core.events import parse_event
from streams.core.seals import SealPolicy
from streams.core.snapshot import SnapshotCodec, SnapshotError, digest, dump_lineage, load_lineage
from streams.core.state import Config
from streams.errors import TraintraceError
from streams.testing.cohort import generate_cohorts, seal_events

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Frozen:
    a: int
    b: str | None = None


@dataclass(slots=True)
class Mutable:
    x: list
    y: dict


@dataclass(frozen=True)
class FrozenDict:
    name: str
    tags: tuple = ()


class Slotted:
    __slots__ = ("p", "q")

    def __init__(self, p, q=None):
        self.p = p
        if q is not None:
            self.q = q


class Plain:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class Child(Plain):
    pass


class Cached:
    def __init__(self, data):
        self.data = data
        self.cache = {"expensive": object()}


def codec() -> SnapshotCodec:
    c = SnapshotCodec()
    for cls in (Frozen, Mutable, FrozenDict, Slotted, Plain):
        c.register(cls)
    c.register(Cached, transient={"cache": dict})
    return c


def roundtrip(value, c: SnapshotCodec | None = None, **kw):
    c = c or codec()
    return c.loads(c.dumps(value, **kw), **kw)


# ------------------------------------------------------------------------ values


@pytest.mark.parametrize("value", [
    None, True, False, 0, -1, 2**63 - 1, -(2**200), 0.1, -0.0, 1e-300, 1e300, math.inf, -math.inf,
    "", "ids", "é€😀", "x" * 1000, b"", b"\x00\xff" * 10, (), (1, "a", None), [], [1, [2, [3]]],
    {}, {"a": 1, "b": [2]}, frozenset(), frozenset({1, 2}), set(), {"a", "b"},
])
def test_plain_values_roundtrip_with_their_types(value):
    got = roundtrip(value)
    assert got == value and type(got) is type(value)


def test_type_distinctions_survive():
    value = [1, 1.0, True, (1,), [1], {1}, frozenset({1}), b"1", bytearray(b"1"), "1", None]
    got = roundtrip(value)
    assert [type(x) for x in got] == [type(x) for x in value]
    assert got == value


def test_floats_are_exact_including_nan_and_signed_zero():
    values = [math.nan, -0.0, 5e-324, 0.1 + 0.2, 1 / 3, -math.inf]
    got = roundtrip(values)
    assert math.isnan(got[0])
    assert math.copysign(1, got[1]) == -1
    assert got[2:] == values[2:]


@pytest.mark.parametrize("typecode", array.typecodes)
def test_arrays_keep_typecode_and_content(typecode):
    if typecode in ("u", "w"):  # w: UCS-4 characters, new in 3.13
        a = array.array(typecode, "héllo")
    elif typecode in "fd":
        a = array.array(typecode, [0.5, -1.25, math.inf, 3.0])
    else:
        a = array.array(typecode, [0, 1, 2, 100])
    got = roundtrip(a)
    assert type(got) is array.array and got.typecode == typecode and got.tobytes() == a.tobytes()


def test_dicts_keep_insertion_order_and_any_hashable_keys():
    d = {"z": 1, ("job", 3): 2, 7: 3, None: 4, frozenset({"a"}): 5, (1, (2, "x")): 6, 1.5: 7, b"k": 8}
    got = roundtrip(d)
    assert list(got.items()) == list(d.items())
    d2 = {k: k for k in ["b", "a", "c"]}
    assert list(roundtrip(d2)) == ["b", "a", "c"]


def test_sets_are_written_in_a_canonical_order():
    c = codec()
    a = {("j2", 1), ("j10", 0), ("j1", 5)}
    b = set()
    for x in sorted(a, reverse=True):
        b.add(x)
    assert c.dumps(a) == c.dumps(b)
    assert c.dumps({"x", "y", "z"}) == c.dumps({"z", "y", "x"})
    mixed = {1, "a", (1, "b"), None, 2.5, b"q", frozenset({3})}
    assert roundtrip(mixed) == mixed


def test_a_set_of_objects_is_refused_not_written_in_some_order():
    with pytest.raises(SnapshotError, match="set holding a Frozen"):
        codec().dumps({Frozen(1), Frozen(2)})


# ------------------------------------------------------------------------ classes


def test_dataclasses_slots_and_dict_classes_roundtrip():
    s = Slotted(1)
    value = [Frozen(1, "x"), Mutable([1], {"k": (2,)}), FrozenDict("n", ("t",)), s, Slotted(2, [3]),
             Plain(a=1, b={"c": 2})]
    got = roundtrip(value)
    assert got[0] == Frozen(1, "x") and type(got[0]) is Frozen
    assert got[1] == Mutable([1], {"k": (2,)})
    assert got[2] == FrozenDict("n", ("t",))
    assert got[3].p == 1 and not hasattr(got[3], "q")  # an unset slot stays unset
    assert got[4].p == 2 and got[4].q == [3]
    assert type(got[5]) is Plain and got[5].__dict__ == {"a": 1, "b": {"c": 2}}
    with pytest.raises(Exception):
        got[0].a = 2  # still frozen


def test_constructors_are_not_called_on_load():
    calls = []

    class Loud:
        def __init__(self):
            calls.append(1)
            self.v = 1

    c = SnapshotCodec()
    c.register(Loud)
    data = c.dumps(Loud())
    calls.clear()
    assert c.loads(data).v == 1 and calls == []


def test_transient_attributes_are_not_written_and_come_back_empty():
    c = codec()
    obj = Cached([1, 2])
    data = c.dumps(obj)
    assert b"expensive" not in S.payload(data)
    got = c.loads(data)
    assert got.data == [1, 2] and got.cache == {}


def test_unordered_dict_attributes_are_written_sorted():
    c = SnapshotCodec()
    c.register(Plain, unordered=("idx",))
    one, two = Plain(idx={"b": 1, "a": 2}, seq={"b": 1, "a": 2}), Plain(idx={"a": 2, "b": 1}, seq={"b": 1, "a": 2})
    assert c.dumps(one) == c.dumps(two)
    got = c.loads(c.dumps(one))
    assert list(got.idx) == ["a", "b"] and list(got.seq) == ["b", "a"]


def test_unregistered_classes_and_subclasses_are_refused_at_dump():
    with pytest.raises(SnapshotError, match="not registered"):
        codec().dumps([Child(a=1)])
    with pytest.raises(SnapshotError, match="not registered"):
        codec().dumps(object())


def test_register_refuses_builtins_and_name_clashes():
    c = SnapshotCodec()
    with pytest.raises(SnapshotError):
        c.register(dict)
    c.register(Plain, name="thing")
    with pytest.raises(SnapshotError, match="taken"):
        c.register(Child, name="thing")


def test_a_higher_layer_registers_on_a_copy_without_touching_the_core_codec():
    core = S.core_codec()
    mine = core.copy()
    mine.register(Frozen)
    assert roundtrip([Frozen(3)], mine) == [Frozen(3)]
    with pytest.raises(SnapshotError):
        core.dumps(Frozen(3))
    data = mine.dumps(Frozen(3))
    with pytest.raises(SnapshotError, match="not allowed"):
        core.loads(data)


# ------------------------------------------------------------------------ sharing and cycles


def test_shared_references_stay_shared():
    shared = Slotted([1])
    inner = [1, 2]
    value = {"a": [shared, shared], "b": (shared, inner), "c": inner, "d": {"x": inner}}
    got = roundtrip(value)
    assert got["a"][0] is got["a"][1] is got["b"][0]
    assert got["b"][1] is got["c"] is got["d"]["x"]
    got["c"].append(3)
    assert got["b"][1] == [1, 2, 3]


def test_cycles_are_restored():
    a, b = Plain(name="a"), Plain(name="b")
    a.other, b.other = b, a
    lst: list = [a]
    lst.append(lst)
    d: dict = {}
    d["self"] = d
    s = Slotted(None)
    s.p = s
    got = roundtrip([a, lst, d, s])
    ga, gl, gd, gs = got
    assert ga.other.other is ga and ga.other.name == "b"
    assert gl[1] is gl and gl[0] is ga
    assert gd["self"] is gd
    assert gs.p is gs


def test_substitutes_are_written_by_name_and_given_back():
    config = Config(window=5)
    other = Config(window=5)
    value = {"cfg": config, "again": [config], "equal_but_not_it": other}
    c = SnapshotCodec()
    c.register(Config)  # only so the non-substituted equal one can be written in this test
    c.register(SealPolicy)
    data = c.dumps(value, substitute={"config": config})
    mine = Config(window=5)
    got = c.loads(data, substitute={"config": mine})
    assert got["cfg"] is mine and got["again"][0] is mine
    assert got["equal_but_not_it"] is not mine and got["equal_but_not_it"] == other
    with pytest.raises(SnapshotError, match="substitute 'config'"):
        c.loads(data)


# ------------------------------------------------------------------------ determinism


def test_the_same_graph_gives_the_same_bytes():
    def build():
        shared = Frozen(1)
        return {"s": {"b", "a"}, "l": [shared, Slotted(shared)], "t": (1.5, b"x")}
    assert codec().dumps(build()) == codec().dumps(build())


@dataclass(frozen=True, slots=True)
class Value:
    kind: str
    n: int = 0


def _every_tag():
    """A graph with every tag of the format, shared objects and strings, a substitute, and the
    scalars json writes in its own way (NaN, infinities, -0.0, escapes, a lone surrogate)."""
    shared = Frozen(1, "shared-string-value")
    sub = Plain(name="the-substitute")
    s = Slotted([1, 2])
    graph = {"scalars": [None, True, False, 0, -7, 2**70, 0.1, -0.0, 5e-324, math.nan, math.inf, -math.inf,
                         "", "short", "a\"quote\\and\ncontrol\x01", "é€😀\u2028", "\ud800-surrogate-x"],
             "tags": ((1, "t"), frozenset({3, 1, 2}), b"\x00\xff", bytearray(b"ba"), array.array("d", [1.5, -2.0]),
                      array.array("q", []), {"z", "a", "long-string-in-set"}, set()),
             "objects": [shared, shared, Mutable([shared], {"k": shared}), FrozenDict("fd", (1,)), s, s,
                         Slotted(3, "q-value-long"), Plain(a=1, b=[sub]), Cached("data-that-is-long"),
                         Value("value-kind-long"), Value("value-kind-long", 2)],
             "refs": ["shared-string-value", "shared-string-value", "long-string-in-set"],
             "sub": sub, "empty": [[], {}, (), frozenset()]}
    return graph, {"subst": sub}


#: the payload of ``_every_tag()``, as the format's first encoder (a tree of lists given to
#: ``json.dumps``) wrote it: any encoder must write these bytes (old snapshots' digests hold)
EVERY_TAG = (
    '["d","scalars",["l",null,true,false,0,-7,1180591620717411303424,0.1,-0.0,5e-324,NaN,Infinity,-I'
    'nfinity,"","short","a\\"quote\\\\and\\ncontrol\\u0001","é€😀\u2028","\ud800-surrogate-x"],"tags",["t",["t",1,"t'
    '"],["f",1,2,3],["b","AP8="],["B","YmE="],["a","d","AAAAAAAA+D8AAAAAAAAAwA=="],["a","q",""],["s"'
    ',"a","long-string-in-set","z"],["s"]],"objects",["l",["o","Frozen",1,"shared-string-value"],["r'
    '",11],["o","Mutable",["l",["r",11]],["d","k",["r",11]]],["o","FrozenDict","name","fd","tags",["'
    't",1]],["o","Slotted",["l",1,2],["u"]],["r",17],["o","Slotted",3,"q-value-long"],["o","Plain","'
    'a",1,"b",["l",["x","subst"]]],["o","Cached","data","data-that-is-long"],["v","Value","value-kin'
    'd-long",0],["v","Value",["r",25],2]],"refs",["l",["r",12],["r",12],["r",8]],"sub",["x","subst"]'
    ',"empty",["l",["l"],["d"],["t"],["f"]]]'
)


def _named_codec() -> SnapshotCodec:
    """The test classes under names that do not depend on how pytest imported this module."""
    c = SnapshotCodec()
    for cls in (Frozen, Mutable, FrozenDict, Slotted, Plain):
        c.register(cls, name=cls.__name__)
    c.register(Cached, name="Cached", transient={"cache": dict})
    c.register(Value, name="Value", value=True)
    return c


def test_the_payload_is_the_formats_first_encoders_byte_for_byte():
    c = _named_codec()
    graph, subst = _every_tag()
    assert G.payload(c.dumps(graph, substitute=subst)).decode("utf-8", "surrogatepass") == EVERY_TAG


@pytest.mark.parametrize("seed", [0, 3])
def test_the_payload_is_json_as_json_writes_it(seed):
    """What the encoder writes by hand is what ``json.dumps`` writes for the same tree: parse it
    and write it again, the bytes do not change."""
    lin = Lineage()
    for i, d in enumerate(generate_cohorts(jobs=12, cohort_size=6, steps=200, seed=seed, divergence_rate=0.5,
                                           alias_prob=0.2, exploit_every=15, exploit_prob=0.8)):
        lin.fold(parse_event(d), 1000 + i)
        lin.decide()
    graph, subst = _every_tag()
    for data in (dump_lineage(lin), _named_codec().dumps(graph, substitute=subst)):
        text = G.payload(data).decode("utf-8", "surrogatepass")
        assert json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False) == text


_DUMP_SCRIPT = """
import sys
from streams.core.decide import Lineage
from streams.core.events import parse_event
from streams.core.snapshot import SnapshotCodec, digest, dump_lineage
from streams.testing.cohort import generate_cohorts

c = SnapshotCodec()
graph = {"strs": {f"s{i}" for i in range(50)}, "keys": frozenset((f"j{i}", i % 3) for i in range(40)),
         "nested": {frozenset({"a", "b", "c"}): {("x", 1), ("y", 2)}}}
print(digest(c.dumps(graph)))
for seed in (0, 1, 4, 7):
    lin = Lineage()
    for i, d in enumerate(generate_cohorts(jobs=12, cohort_size=12, steps=200, seed=seed, divergence_rate=0.5,
                                           alias_prob=0.2, exploit_every=15, exploit_prob=0.8)):
        lin.fold(parse_event(d), 1000 + i)
        lin.decide()
    print(digest(dump_lineage(lin)))
"""


def test_bytes_do_not_depend_on_hash_randomisation():
    outs = []
    for seed in ("1", "2", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", _DUMP_SCRIPT], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout.split())
    assert len(outs[0]) == 5
    assert outs[0] == outs[1] == outs[2]


# ------------------------------------------------------------------------ refusal


def _raw(tree) -> bytes:
    """A snapshot whose payload is ``tree``, as a forger would write it."""
    return G._HEADER + zlib.compress(json.dumps(tree).encode())


def _refused(data, c: SnapshotCodec | None = None, **kw) -> str:
    with pytest.raises(SnapshotError) as info:
        (c or codec()).loads(data, **kw)
    msg = str(info.value)
    assert "\n" not in msg and msg
    return msg


def test_snapshot_error_is_a_traintrace_error():
    assert issubclass(SnapshotError, CoreError) and issubclass(SnapshotError, TraintraceError)


@pytest.mark.parametrize("data", [
    b"", b"TT", b"garbage bytes here", S.MAGIC, S.MAGIC + b"\x00",
    S.MAGIC + (2).to_bytes(2, "big") + zlib.compress(b"1"),  # a future version
    G._HEADER + b"not zlib at all",
    G._HEADER + zlib.compress(b"1") + b"trailing",
    G._HEADER + zlib.compress(b"{not json"),
    G._HEADER + zlib.compress(b"\xff\xfe"),
])
def test_malformed_bytes_are_refused(data):
    _refused(data)


def test_every_truncation_is_refused():
    data = codec().dumps({"a": [Frozen(1, "x" * 50)] * 3, "b": array.array("q", range(100))})
    for n in range(len(data)):
        _refused(data[:n])


def test_not_bytes_is_refused():
    _refused("a string")  # type: ignore[arg-type]


@pytest.mark.parametrize("tree", [
    {"a": 1},                                   # a bare JSON object
    ["?"], [], [1, 2], ["zz", 1],                  # no or unknown tag
    ["r", 0], ["l", ["r", 5]], ["r", "0"], ["r", -1], ["r"],  # references to nothing
    ["d", 1], ["d", ["l"], 1],                  # odd items, unhashable key
    ["s", ["l"]], ["f", ["d"]],                 # unhashable set items
    ["a", "Z", ""], ["a", 5, ""], ["a", "q", "AAA"], ["a", "q", "!!!!"], ["a", "q"],  # bad arrays
    ["b", "@@@"], ["b"], ["B", 3],              # bad base64
    ["x", "config"], ["x", 3],                  # substitute not given
    ["o", "os.system", "rm -rf /"], ["o", "builtins.eval", "1"], ["o", "posix.system"], ["o"], ["o", 5],
    ["o", f"{Frozen.__module__}.Frozen"],       # too few fields
    ["o", f"{Frozen.__module__}.Frozen", 1, None, 3],  # too many
    ["o", f"{Slotted.__module__}.Slotted", 1, 2, "extra", 3],  # __dict__ pairs on a slots class
    ["o", f"{Plain.__module__}.Plain", 1, 2],   # a non-string attribute name
    ["o", f"{Plain.__module__}.Plain", "k"],    # a name without a value
])
def test_malformed_payloads_are_refused(tree):
    _refused(_raw(tree))


def test_a_forged_class_name_never_builds_anything(monkeypatch):
    imported = []
    real_import = __import__

    def spy(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)

    data = _raw(["l", ["o", "os.system", "echo pwned"], ["o", "subprocess.Popen", ["l", "sh"]]])
    monkeypatch.setattr("builtins.__import__", spy)
    msg = _refused(data)
    monkeypatch.undo()
    assert "os.system" in msg and "not allowed" in msg
    assert "os" not in imported and "subprocess" not in imported


def test_deep_nesting_is_refused_not_crashing():
    _refused(G._HEADER + zlib.compress(b"[\"l\"," * 100_000 + b"1" + b"]" * 100_000))


def test_a_zlib_bomb_is_refused(monkeypatch):
    monkeypatch.setattr(G, "MAX_PAYLOAD", 1000)
    data = codec().dumps(["x" * 5000])
    msg = _refused(data)
    assert "inflates past" in msg


def test_digest_is_over_the_payload_not_the_compression():
    c = codec()
    value = {"a": list(range(1000))}
    fast, small = c.dumps(value, level=1), c.dumps(value, level=9)
    assert fast != small and digest(fast) == digest(small)
    with pytest.raises(SnapshotError):
        digest(b"nonsense")


# ------------------------------------------------------------------------ lineages


def _folded(jobs=8, sealed=False, seed=3, config=None) -> Lineage:
    dicts = list(generate_cohorts(jobs=jobs, cohort_size=jobs, steps=200, seed=seed, divergence_rate=0.5,
                                  alias_prob=0.2, exploit_every=15, exploit_prob=0.8))
    if sealed:
        dicts = list(seal_events(dicts, every=1000, seed=seed))
    lin = Lineage(config)
    for i, d in enumerate(dicts[: len(dicts) * 2 // 3]):
        lin.fold(parse_event(d), 1000 + i, None, ("ref", i))
        lin.decide()
    return lin


def test_a_lineage_roundtrips_without_config_or_keys():
    lin = _folded(sealed=True)
    assert lin.seals.keys and lin.seals.holding  # keys loaded, events held at the cut
    data = dump_lineage(lin)
    raw = S.payload(data)
    assert b"nacl" not in raw and b"VerifyKey" not in raw and b"Config" not in raw
    config = Config(seals=SealPolicy(max_held=99))
    back = load_lineage(data, config)
    assert back.state.config is config and back.seals.policy is config.seals
    assert back.seals.jobs is back.state.jobs and back.seals.keys == {}
    assert back.final_state() == lin.final_state()
    assert back.seals.holding == lin.seals.holding
    job = next(j for j in back.state.jobs.values() if j.public_key)
    assert back.seals._key(job).encode().hex() == job.public_key  # reloaded on first use


def test_load_lineage_refuses_other_tunables_and_other_snapshots():
    data = dump_lineage(_folded(jobs=3))
    with pytest.raises(SnapshotError, match="window"):
        load_lineage(data, Config(window=3))
    with pytest.raises(SnapshotError, match="not the snapshot of a Lineage"):
        load_lineage(S.core_codec().dumps([1, 2, 3]), Config())
    with pytest.raises(SnapshotError, match="not allowed"):
        load_lineage(_raw(["l", "traintrace.lineage/1", ["l", 10, 3.0, 0], ["o", "os.system"]]), Config())


def test_measure_dump_and_load(capsys):
    """The figures of the module docstring (prints them; set TRAINTRACE_SNAPSHOT_BENCH=1 for
    the 100k-event cohort too). Asserts nothing about time."""
    sizes = [100, 1000] if os.environ.get("TRAINTRACE_SNAPSHOT_BENCH") else [20]
    for jobs in sizes:
        lin = Lineage()
        n = 0
        for i, d in enumerate(generate_cohorts(jobs=jobs, cohort_size=jobs, steps=800, seed=7)):
            lin.fold(parse_event(d), 1000 + i)
            lin.decide()
            n += 1
        t0 = time.perf_counter()
        data = dump_lineage(lin)
        t1 = time.perf_counter()
        back = load_lineage(data, lin.config)
        t2 = time.perf_counter()
        assert dump_lineage(back) == data
        with capsys.disabled():
            print(f"\nsnapshot of {n} events: dump {1e3 * (t1 - t0):.0f} ms, load {1e3 * (t2 - t1):.0f} ms, "
                  f"{len(data) / 1e6:.2f} MB ({len(S.payload(data)) / 1e6:.1f} MB of JSON)")


def test_a_snapshot_between_fold_and_decide_keeps_the_pending_marks():
    dicts = list(generate_cohorts(jobs=4, cohort_size=4, steps=120, seed=5, divergence_rate=1.0))
    lin = Lineage()
    for d in dicts[:-3]:
        lin.fold(parse_event(d), 10)
    back = load_lineage(dump_lineage(lin), lin.config)
    assert back.decide() == lin.decide()
    assert dump_lineage(back) == dump_lineage(lin)


def test_a_held_event_with_an_object_ref_cannot_be_snapshotted():
    lin = _folded(jobs=2, sealed=True)
    assert lin.seals.holding
    first = next(iter(next(iter(lin.seals.held.values())).values()))[0]
    first.ref = object()
    with pytest.raises(SnapshotError, match="builtins.object"):
        dump_lineage(lin)


def test_a_new_codec_allows_the_core_and_an_empty_one_nothing():
    data = dump_lineage(_folded(jobs=2))
    assert type(SnapshotCodec().loads(data, substitute={"config": Config()})[2]) is Lineage
    with pytest.raises(SnapshotError, match="not allowed"):
        SnapshotCodec(core=False).loads(data, substitute={"config": Config()})


def test_a_substituted_config_brings_its_seal_policy():
    config = Config(seals=SealPolicy(require_sealed=True))
    lin = _folded(jobs=2, sealed=True, config=config)
    data = SnapshotCodec().dumps({"engine": lin}, substitute={"config": config})
    mine = Config(seals=SealPolicy(require_sealed=True, max_held=7))
    back = SnapshotCodec().loads(data, substitute={"config": mine})["engine"]
    assert back.state.config is mine and back.seals.policy is mine.seals
