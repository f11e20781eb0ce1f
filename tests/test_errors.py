"""deployopt.errors.first_line: the one line of a library's exception that many one-line errors quote
(model loading, surgery, fidelity, fp16 conversion, batch restore, onnxruntime)."""

from __future__ import annotations

from deployopt.errors import first_line


def test_first_line_of_a_paragraph() -> None:
    exc = ValueError("[ShapeInferenceError] bad dims\n  in node Conv_3\n  more context")
    assert first_line(exc) == "[ShapeInferenceError] bad dims"


def test_blank_lines_before_the_message_are_skipped() -> None:
    assert first_line(RuntimeError("\n\n  onnxruntime: cannot load\nsecond")) == "onnxruntime: cannot load"


def test_a_blank_message_is_the_type_name_or_what_the_caller_says() -> None:
    assert first_line(KeyError()) == "KeyError"
    assert first_line(OSError("   \n")) == "OSError"
    exc = ValueError()
    assert first_line(exc, repr(exc)) == "ValueError()"
    assert first_line(ValueError("said"), "unused") == "said"
