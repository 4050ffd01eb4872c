"""The solver registry: one record per solver, and the one check of solver options wherever
they enter (the layer, the workflow's config, ``inn train --settings``)."""

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
from conftest import train_argv

import inn.solvers as S
from inn.errors import InnError
from inn.experiment.config import SCHEMA, load_schema, validate_config
from inn.experiment.train import loop as train_module
from inn.nn import ImplicitGRU
from inn.nn.implicit_function import BACKWARD_OPTIONS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "implicit-layer.md"


@pytest.mark.parametrize(
    "options, message",
    [
        # a negative Anderson memory ran as plain damped iteration, silently
        ({"memory": -3}, r"^config: solver\.options\.memory: -3 is less than the minimum of 1$"),
        # a string where a number belongs was a traceback in the training job
        ({"memory": "five"}, r"^config: solver\.options\.memory must be an integer >= 1, not 'five'$"),
        # a misspelt key passed the config check and failed only in the training job
        (
            {"memroy": 3},
            r"^config: solver\.options\.memroy: not an option of solver 'anderson' \(did you mean "
            r"'memory'\?\); it takes .*\bmemory\b",
        ),
        (
            {"sweep": "red-black"},
            r"^config: solver\.options\.sweep must be one of 'tridiagonal', 'red_black', 'jacobi', "
            r"not 'red-black' \(did you mean 'red_black'\?\)$",
        ),
        ({"cuda_graph": "yes"}, r"^config: solver\.options\.cuda_graph must be true, false or 'auto', not 'yes'$"),
        ({"beta": 1.5}, r"^config: solver\.options\.beta: 1\.5 is greater than the maximum of 1$"),
        (
            {"backward_solver": "phantom", "backward_steps": 0},
            r"^config: solver\.options\.backward_steps: 0 is less than the minimum of 1$",
        ),
        (
            {"candidates": ["zero"]},
            r"^config: solver\.options\.candidates must be a non-empty list of .*, not "
            r"\['zero'\] \(did you mean 'zeros'\?\)$",
        ),
    ],
)
def test_the_config_check_refuses_solver_options_in_one_line(options, message):
    with pytest.raises(InnError, match=message) as info:
        validate_config({"solver": {"name": "anderson", "options": options}}, SCHEMA)
    assert "\n" not in str(info.value)


def test_options_are_checked_against_the_named_solver():
    with pytest.raises(InnError, match=r"^config: solver\.options\.memory: not an option of solver 'newton_krylov'"):
        validate_config({"solver": {"name": "newton_krylov", "options": {"memory": 5}}}, SCHEMA)
    config = validate_config(
        {"solver": {"name": "newton_krylov", "options": {"forcing": 1e-3, "backward_tol": 1e-6}}}, SCHEMA
    )
    assert config["solver"]["options"] == {"forcing": 1e-3, "backward_tol": 1e-6}


def test_the_schema_takes_solver_names_from_the_registry():
    schema = load_schema(SCHEMA)
    assert "enum" not in schema["properties"]["solver"]["properties"]["name"]  # no list written by hand
    assert "properties" not in schema["$defs"]["solver_options"]
    with pytest.raises(InnError, match=r"^config: solver\.name: 'andersen' is not one of \['newton_krylov', "):
        validate_config({"solver": {"name": "andersen"}}, SCHEMA)


def test_a_registered_solver_is_a_name_the_config_accepts(monkeypatch):
    import inn.experiment.config as config_module
    import inn.solvers.table as table

    solvers = dict(S.SOLVERS)  # the registry register_solver adds to, and the config reads, for this test alone
    monkeypatch.setattr(table, "SOLVERS", solvers)
    monkeypatch.setattr(config_module, "SOLVERS", solvers)
    spec = dataclasses.replace(
        solvers["fixed_point"],
        name="damped",
        options=(S.SolverOption("beta", 0.5, "damping", type="number", exclusive_minimum=0, maximum=1),),
    )
    S.register_solver(spec)
    config = validate_config({"solver": {"name": "damped", "options": {"beta": 0.25}}}, SCHEMA)
    assert config["solver"]["name"] == "damped"
    with pytest.raises(InnError, match=r"^config: solver\.options\.beta: 0 is less than or equal to the minimum of 0$"):
        validate_config({"solver": {"name": "damped", "options": {"beta": 0}}}, SCHEMA)
    with pytest.raises(InnError, match=r"^a solver named 'damped' is registered already; give yours another name$"):
        S.register_solver(spec)
    with pytest.raises(InnError, match=r"^solver 'mine': option\(s\) tol belong to every solver"):
        S.register_solver(dataclasses.replace(spec, name="mine", options=(S.COMMON_OPTIONS[0],)))


def test_an_unknown_solver_lists_the_known_ones():
    with pytest.raises(
        InnError,
        match=r"^unknown solver 'andersen' \(did you mean 'anderson'\?\); choose one of "
        r"newton_krylov, newton_direct, anderson, fixed_point$",
    ):
        S.solver_spec("andersen")
    with pytest.raises(InnError, match=r"^unknown solver 'magic'; choose one of newton_krylov"):
        ImplicitGRU(3, 4, solver="magic")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"memory": -3}, r"^solver 'anderson' option memory: -3 is less than the minimum of 1$"),
        ({"memory": "five"}, r"^solver 'anderson' option memory must be an integer >= 1, not 'five'$"),
        (
            {"low_precision": "yes"},
            r"^solver 'anderson' option low_precision must be true, false or 'auto', not 'yes'$",
        ),
        ({"memroy": 3}, r"^solver 'anderson' has no option 'memroy' \(did you mean 'memory'\?\); it takes "),
        (
            {"backward_tol": -1.0},
            r"^solver 'anderson' option backward_tol: -1\.0 is less than or equal to the minimum of 0$",
        ),
        ({"tol": float("inf")}, r"^solver 'anderson' option tol: inf is not a finite number$"),
    ],
)
def test_the_layer_refuses_the_same_options(options, message):
    with pytest.raises(InnError, match=message):
        ImplicitGRU(3, 4, solver="anderson", **options)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"model": {"solver": "anderson", "solver_options": {"memory": -3}}},
            r"^--settings: model\.solver_options\.memory: -3 is less than the minimum of 1$",
        ),
        (
            {"model": {"solver": "anderson", "solver_options": {"memory": "five"}}},
            r"^--settings: model\.solver_options\.memory must be an integer >= 1, not 'five'$",
        ),
        (
            {"model": {"solver": "anderson", "solver_options": {"memroy": 3}}},
            r"^--settings: model\.solver_options\.memroy: not an option of solver 'anderson' "
            r"\(did you mean 'memory'\?\)",
        ),
        # the layer's default solver when none is named
        (
            {"model": {"solver_options": {"krylov_max_iter": 5}}},
            r"^--settings: model\.solver_options\.krylov_max_iter: not an option of solver 'anderson'",
        ),
        ({"model": {"solver": "andersen"}}, r"^--settings: model\.solver: unknown solver 'andersen' \(did you mean"),
    ],
)
def test_train_settings_are_checked_before_any_data_is_read(settings, message):
    with pytest.raises(InnError, match=message):
        train_module._json_settings(json.dumps(settings), "--settings")


def test_the_records_defaults_are_the_functions_own():
    """The registry documents the defaults; the solver functions apply them: the two agree."""
    for spec in S.SOLVERS.values():
        params = inspect.signature(spec.function).parameters
        own = [o for o in spec.options if o not in S.FALLBACK_OPTIONS]  # solve() applies those itself
        assert {o.name: o.default for o in own} == {o.name: params[o.name].default for o in own}
        assert not any(o.problem(o.default) for o in spec.options), spec.name
    params = inspect.signature(S.solve).parameters
    common = S.COMMON_OPTIONS
    assert {o.name: o.default for o in common} == {o.name: params[o.name].default for o in common}
    assert BACKWARD_OPTIONS == tuple(o.name for o in S.BACKWARD_OPTIONS)
    # the limits and starting points per solver, as they were
    assert {name: spec.max_iter for name, spec in S.SOLVERS.items()} == {
        "newton_krylov": 40,
        "newton_direct": 20,
        "anderson": 200,
        "fixed_point": 500,
    }
    assert S.SOLVERS["newton_krylov"].candidates == ("F0", "one_step", "random")
    assert S.SOLVERS["anderson"].candidates == ("zeros", "one_step", "random")


def test_resumable_changes_are_the_records_resumable_options():
    solver_part = {key.rsplit(".", 1)[1] for key in train_module.RESUMABLE_CHANGES if key.startswith("model.")}
    assert solver_part == S.resumable_options() == {"cuda_graph", "cuda_graph_steps", "backward_cuda_graph"}


def test_the_docs_options_table_is_the_registrys():
    text = DOCS.read_text(encoding="utf-8")
    table = re.search(r"<!-- options table: inn\.solvers\.options_table\(\) -->\n(.*?)\n\n", text, re.S)
    assert table and table[1] == S.options_table()


def test_inn_train_stops_on_a_bad_solver_option_in_one_line(tmp_path, capsys):
    from inn.experiment.cli import main

    settings = '{"model": {"solver": "anderson", "solver_options": {"memory": -3}}}'
    assert main(train_argv("walks", tmp_path / "none", "inn", tmp_path / "out", "--settings", settings)) != 0
    assert capsys.readouterr().err.strip() == (
        "error: --settings: model.solver_options.memory: -3 is less than the minimum of 1"
    )
