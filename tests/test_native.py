"""Fingerprints of C++ launcher code (fp4patch/catalog/native.py; issue 24): what the TRT-LLM-Gen MoE fakes mirror of
``flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu``, the outputs ``do_finalize=False`` returns, which the
CPU check cannot see.

A piece ``path.cu:Class.method[names]`` is the statements of that definition naming one of ``names`` (with the
conditions they stand under), comments and whitespace gone: clang-format and comment edits keep its digest, a
changed allocation or return changes it. On the real wheels: 0.6.9 → 0.6.10 keeps every FP4 launcher piece (the
step the replay carries on that evidence), 0.6.17 → 0.6.18 moves the FP4 routing allocation (a refusal names it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fp4patch.catalog.fingerprint import MISSING, ModuleReader, native_files
from fp4patch.catalog.native import definitions, piece_text, selected_statements, tokens
from fp4patch.catalog.spec import load_specs

from .conftest import release_site

LAUNCHER = "flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu"

SOURCE = r"""
#include <vector>  // a comment
namespace flashinfer {
/* a block
   comment { with a brace */
class Launcher : public Base {
 public:
  void prepare(int64_t& tactic) override {
    out = alloc({n, "{"}, dl_bfloat16);  // the output
    workspace.out = out.data_ptr();
    other = alloc({m}, dl_int32);
    if (flag) {
      out2 = alloc({n * 2}, dl_int32);
    } else out2 = alloc({n}, dl_int32);
  }
  Array<Tensor> run(bool finalize) {
    if (finalize) return {};
    return {out, out2};
  }
};
void Launcher::late(int x) { out = alloc({x}, dl_int8); }
Array<Tensor> entry(TensorView a, int b);
Array<Tensor> entry(TensorView a, int b) {
  auto launcher = std::make_unique<Launcher>(a);
  return launcher->run(b);
}
}  // namespace flashinfer
"""


def test_tokens_drop_comments_and_whitespace_but_keep_strings_and_directives() -> None:
    toks = tokens(SOURCE)
    assert "#include <vector>" in toks and '"{"' in toks
    assert not any("comment" in t for t in toks) and not any(t.isspace() for t in toks)
    reformatted = SOURCE.replace("    out = alloc({n, ", "    out =\n        alloc(  {n,   ").replace("// the output", "// renamed comment")
    assert tokens(reformatted) == toks


def test_definitions_find_methods_in_and_out_of_the_class_and_free_functions_not_declarations_or_calls() -> None:
    (prepare,) = definitions(SOURCE, "Launcher.prepare")
    assert prepare.startswith("void prepare ( int64_t & tactic ) override {") and prepare.endswith("}")
    assert definitions(SOURCE, "Launcher.late") == ["void Launcher :: late ( int x ) { out = alloc ( { x } , dl_int8 ) ; }"]
    (entry,) = definitions(SOURCE, "entry")  # the declaration before it is not a definition
    assert "make_unique" in entry
    assert definitions(SOURCE, "Launcher.missing") == [] and definitions(SOURCE, "run") == []  # run is a method, not a free function


def test_selected_statements_are_the_ones_naming_the_outputs_with_their_conditions() -> None:
    assert selected_statements(SOURCE, "Launcher.prepare", ("out2",)) == [
        "if ( flag ) => out2 = alloc ( { n * 2 } , dl_int32 ) ;",
        "else of if ( flag ) => out2 = alloc ( { n } , dl_int32 ) ;",
    ]
    assert selected_statements(SOURCE, "Launcher.prepare", ("out",)) == [
        ' => out = alloc ( { n , "{" } , dl_bfloat16 ) ;',
        " => workspace . out = out . data_ptr ( ) ;",
    ]
    assert selected_statements(SOURCE, "Launcher.run", ("return",)) == ["if ( finalize ) => return { } ;", " => return { out , out2 } ;"]
    assert selected_statements(SOURCE, "Launcher.nothing", ("out",)) is None
    # a piece: missing, the statements selected, or the whole definition
    assert piece_text(SOURCE, "Launcher.nothing[out]") is None
    assert piece_text(SOURCE, "Launcher.run[return]") == "if ( finalize ) => return { } ;\n => return { out , out2 } ;"
    assert piece_text(SOURCE, "entry") == definitions(SOURCE, "entry")[0]
    changed = SOURCE.replace("out2 = alloc({n * 2}, dl_int32);", "out2 = alloc({n * 4}, dl_int32);")
    assert piece_text(changed, "Launcher.prepare[out2]") != piece_text(SOURCE, "Launcher.prepare[out2]")
    assert piece_text(changed, "Launcher.prepare[out]") == piece_text(SOURCE, "Launcher.prepare[out]")  # not an `out` statement


def test_the_moe_specs_name_the_launcher_and_unpacks_keep_it() -> None:
    assert native_files(load_specs(None)) == {LAUNCHER}
    from fp4patch.catalog.releases import fingerprinted_native

    assert fingerprinted_native() == frozenset({LAUNCHER})


FP4_PIECES = [
    f"{LAUNCHER}:FP4BlockScaleLauncher.prepare_routing[expanded_idx_to_permuted_idx]",
    f"{LAUNCHER}:FusedMoeLauncher.prepare_routing_common[expanded_idx_to_permuted_idx]",
    f"{LAUNCHER}:FP4BlockScaleLauncher.prepare_moe[gemm2_output]",
    f"{LAUNCHER}:FP4BlockScaleLauncher.run[return,result]",
    f"{LAUNCHER}:trtllm_fp4_block_scale_moe[return]",
]


@pytest.mark.parametrize(("old", "new", "changed"), [
    ("0.6.9", "0.6.10", []),
    ("0.6.17", "0.6.18", [0, 3, 4]),
])
def test_the_real_launcher_pieces_across_releases(old: str, new: str, changed: list[int], tmp_path_factory) -> None:
    """The FP4 MoE launcher pieces the specs mirror, on the real wheels: unchanged from 0.6.9 to 0.6.10 (whose
    Python changed: the replay checks it on CPU and carries it on this evidence), changed from 0.6.17 to
    0.6.18 (the routing allocation moved out of FP4BlockScaleLauncher.prepare_routing; the return builds a
    result object): refused, naming them."""
    a = ModuleReader(release_site(old, tmp_path_factory, sources_only=True))
    b = ModuleReader(release_site(new, tmp_path_factory, sources_only=True))
    digests = [(a.piece(p, ""), b.piece(p, "")) for p in FP4_PIECES]
    assert MISSING not in {d for pair in digests for d in pair}, digests
    assert [i for i, (x, y) in enumerate(digests) if x != y] == changed


PYTHON = '''
def op(x, logits, do_finalize):
    """docstring"""
    dtype = logits.dtype if FOLLOW else torch.bfloat16
    weights = torch.empty(x.shape[0], 8, dtype=dtype)
    runner = make_runner(x, weights=weights)
    raw = kernel(x, weights, runner)
    if do_finalize:
        return [x]
    return [raw[0], weights, raw[1]]
'''


def test_python_selection_is_the_allocation_what_sizes_it_and_the_returns(tmp_path) -> None:
    """``qualname[names]`` of a Python definition: the statements assigning a name (and, to a fixed point, the
    locals those read: ``dtype``), and every return with its condition; not the calls that pass the buffer on."""
    import ast

    from fp4patch.catalog.fingerprint import is_selection, statements_naming

    (node,) = ast.parse(PYTHON).body
    lines = statements_naming(node, ("weights", "return"))
    assert len(lines) == 4 and lines[0].startswith(" => Assign(targets=[Name(id='dtype')]") and lines[2].startswith("Name(id='do_finalize') => Return(")
    changed = ast.parse(PYTHON.replace("runner = make_runner(x, weights=weights)", "runner = make_runner(x, weights=weights, fast=True)")).body[0]
    assert statements_naming(changed, ("weights", "return")) == lines  # a call passing the buffer on is not its allocation
    sized = ast.parse(PYTHON.replace("else torch.bfloat16", "else torch.float16")).body[0]
    assert statements_naming(sized, ("weights", "return")) != lines  # what sizes it is
    (tmp_path / "m.py").write_text(PYTHON)
    reader = ModuleReader(tmp_path)
    assert reader.piece("m.py:op[weights,return]", "") != reader.piece("m.py:op", "") != MISSING
    assert reader.piece("m.py:gone[weights]", "") == MISSING and is_selection("m.py:op[weights]") and not is_selection("m.py:op")


@pytest.mark.parametrize(("seen", "fake_raised", "changed", "expected"), [
    (30, [], [], "launcher"),
    (30, [], [FP4_PIECES[2]], "the code that allocates them changed since 0.6.9: flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu: FP4BlockScaleLauncher.prepare_moe[gemm2_output]"),
    (0, [], [], "no case of it could be seen on CPU"),
    (30, ["M=8 do_finalize=False output=narrow"], [], "the fake refuses 'M=8 do_finalize=False output=narrow' where the wrapper returns past the kernel"),
])
def test_launcher_evidence_stands_only_for_unseen_outputs_made_by_unchanged_code(seen, fake_raised, changed, expected, monkeypatch) -> None:
    """The CPU check's side (fp4patch/checks/cpu_check.py), the probe replaced by its result: outputs the CPU cannot see
    pass on evidence only where every selected piece (C++ launcher, Python inner op) equals the verified release's,
    the CPU saw some case of the call, and the fake refuses nothing the wrapper returned from."""
    from fp4patch.checks import cpu_check, fake_check
    from fp4patch.catalog.evidence import NEEDS_CHECK, Basis, Resolution

    spec = next(s for s in load_specs(None) if s.id == "trtllm-fp4-block-scale-moe-fullgraph")
    target = next(t for t in spec.targets if t.contains("0.6.9") and not t.status)
    basis = Basis(NEEDS_CHECK, "0.6.10", "0.6.9", ("trtllm_fp4_block_scale_moe", *changed))
    unseen = [f"case {i}" for i in range(12)]
    result = fake_check.FakeCheckResult(ok=False, cases=seen + 12, compared=seen + 12, not_visible=unseen, fake_raised=list(fake_raised))
    monkeypatch.setattr(fake_check, "run_fake_check", lambda env, site, requests: {"trtllm_fp4_block_scale_moe": result})

    class Installed:  # the launcher's sources are there (a missing one is another refusal)
        def locate(self, relative: str) -> Path:
            return Path(__file__)

    launcher: dict = {}
    problems = cpu_check._fake_problems([spec], {spec.id: Resolution([target], basis)}, Installed(), None, None, launcher)[spec.id]
    if expected == "launcher":
        assert problems == [] and launcher[spec.id] == cpu_check.unseen_pieces(target) and FP4_PIECES[0] in launcher[spec.id]
    else:
        assert len(problems) == 1 and expected in problems[0] and not launcher, problems
