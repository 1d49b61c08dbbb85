"""The programs library: every (program, strategy) runs and verifies bitwise; loading by name and
by path; the errors for unknown programs and strategies."""

import textwrap

import pytest

import simshard as ss
from simshard import Mesh, ShardingError, programs

PAIRS = [(p, s) for p in programs.names() for s in programs.load(p).strategy_names]


def test_the_library_lists_its_programs():
    assert set(programs.names()) >= {"mlp", "transformer", "conv", "reshard_gallery", "shard_map_ring"}
    assert "fhe_conv" not in programs.names()  # replaced by conv


@pytest.mark.parametrize("program, strategy", PAIRS, ids=[f"{p}-{s}" for p, s in PAIRS])
def test_every_strategy_runs_and_verifies_bitwise(run_strategy, program, strategy):
    res = run_strategy(program, strategy)
    assert res.verify.bitwise, str(res.verify)
    # against the plain model (the program's fn or the strategy's reference), not against the
    # strategy's own program run whole, which would share its mistakes; unless the model itself
    # only runs traced (conv's ss.nn.conv2d: then the registry's kernel is the definition)
    prog = programs.load(program)
    s = prog.strategy(strategy)
    try:
        prog.reference(s)(*prog.inputs_for(s))
        plain = True
    except ss.TraceError:
        plain = False
    assert not plain or all("the program run whole" not in c.note for c in res.verify.checks), str(res.verify)
    assert res.verify.op_checks or not res.program.eqns  # op by op too (the gallery's identities have no ops)
    assert res.comm.ratio == 1.0  # every collective moved its analytic minimum
    prog = programs.load(program)
    assert len(res.spmd.schedules) == prog.mesh_for(strategy).size


def test_every_strategy_says_what_it_does():
    for name in programs.names():
        prog = programs.load(name)
        assert prog.about and prog.strategies
        for s in prog.strategies:
            assert s.about and (s.build is None or callable(s.build))


def test_load_by_path_gives_the_same_program(tmp_path):
    import simshard.programs.mlp as mlp

    by_path = programs.load(mlp.__file__)
    assert by_path.name == "mlp" and by_path.strategy_names == programs.load("mlp").strategy_names

    mine = tmp_path / "double.py"
    mine.write_text(textwrap.dedent('''
        import simshard as ss
        from simshard.programs import ProgramDef, Strategy

        def double(x):
            return x * 2

        PROGRAM = ProgramDef("double", "x * 2", double, lambda: (ss.exact_inputs((8, 4)),), {"x": 4},
                             (Strategy("rows", "rows over x", in_shardings=(ss.P("x", None),)),))
    '''))
    prog = programs.load(str(mine))
    res = prog.run("rows", backend="local", mesh={"x": 2})
    assert res.verify.bitwise and res.comm.total_bytes == 0 and len(res.spmd.schedules) == 2


def test_unknown_program_strategy_and_files_are_errors(tmp_path):
    with pytest.raises(ShardingError, match="no program 'nope'.*mlp"):
        programs.load("nope")
    with pytest.raises(ShardingError, match="no program file"):
        programs.load(str(tmp_path / "missing.py"))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ShardingError, match="defines no PROGRAM"):
        programs.load(str(empty))
    with pytest.raises(ShardingError, match="has no strategy 'zero'.*dp, megatron, fsdp, 2d"):
        programs.load("mlp").run("zero", backend="local")
    with pytest.raises(ShardingError, match="has no strategy"):
        programs.load("mlp").mesh_for("zero")


def test_repeated_strategy_names_are_refused():
    s = programs.Strategy("a", "one")
    with pytest.raises(ValueError, match="repeat"):
        programs.ProgramDef("p", "p", abs, tuple, {"x": 1}, (s, s))


def test_mesh_and_inputs_follow_the_strategy_then_the_program():
    conv = programs.load("conv")
    assert conv.mesh_for("x2y8") == Mesh({"x": 2, "y": 8, "z": 1})  # the strategy's own mesh
    assert conv.mesh_for("x2y8", mesh={"x": 1, "y": 16, "z": 1}) == Mesh({"x": 1, "y": 16, "z": 1})  # a given one wins
    assert programs.load("mlp").mesh_for("dp") == Mesh({"x": 2, "y": 4})  # the program's
    x, w = conv.inputs_for("resnet50_y4")
    assert x.shape == (1, 2048, 7, 7) and w.shape == (512, 2048, 1, 1)
    assert conv.inputs_for("y4")[0].shape == (1, 64, 7, 7)
