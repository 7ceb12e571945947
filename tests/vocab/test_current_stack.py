"""The current stack: $ELASTIC_LAB_STACK, else the one selected, else none."""

from __future__ import annotations

from lab.vocab import current_stack as cs


def test_none_is_current_until_one_is_chosen(tmp_path):
    assert cs.current_stack(tmp_path / "stack") is None


def test_a_selected_stack_is_current_until_it_is_unselected(tmp_path):
    selected = tmp_path / "dir" / "stack"
    cs.select_stack("eks-dev", selected)
    assert cs.current_stack(selected) == cs.CurrentStack("eks-dev", f"elastic-lab stack select ({selected})")
    assert cs.unselect_stack(selected) is True
    assert cs.current_stack(selected) is None
    assert cs.unselect_stack(selected) is False


def test_the_environment_wins_over_the_selected_stack(tmp_path, monkeypatch):
    selected = tmp_path / "stack"
    cs.select_stack("eks-dev", selected)
    monkeypatch.setenv(cs.ENV_STACK, " byo ")
    assert cs.current_stack(selected) == cs.CurrentStack("byo", "$ELASTIC_LAB_STACK")
    monkeypatch.setenv(cs.ENV_STACK, "")
    assert cs.current_stack(selected).name == "eks-dev"


def test_an_empty_or_unreadable_selection_is_no_stack(tmp_path):
    selected = tmp_path / "stack"
    selected.write_text("\n")
    assert cs.current_stack(selected) is None
    selected.write_bytes(b"\xff\xfe")
    assert cs.current_stack(selected) is None
