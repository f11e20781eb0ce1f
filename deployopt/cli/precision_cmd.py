"""`deployopt fp16`: type an fp32 model fp16 by hand, for a TensorRT >= 11 that deployopt does not
drive (jetson/runner.py on the board, a user's own trtexec): 11.x has no FP16 flag, so a network
runs in the types its model declares. The backends convert on their own; this is the same step."""

from __future__ import annotations

from pathlib import Path

import typer

from deployopt.cli.app import app, console, input_path, output_option
from deployopt.cli.interrupts import output_complete
from deployopt.fileio import check_output_file, refuse_input_as_output
from deployopt.model import check_weights_name, load_model, refuse_replacing_weights


@app.command("fp16", rich_help_panel="Deploy")
def fp16_cmd(
    model: Path = typer.Argument(..., help="fp32 ONNX model.", parser=input_path("model", "an .onnx file")),
    output: Path = output_option(..., "-o", "--output", help="Where to write the fp16-typed model."),
) -> None:
    """Type a model fp16 for TensorRT >= 11, which has no FP16 flag (inputs and outputs stay fp32)."""
    from deployopt.precision import write_fp16

    check_output_file(output)
    refuse_input_as_output(output, [("model", model)], "-o/--output")
    # a missing, corrupt or unsupported model is named here, in one line; dynamic dims (H, W of a
    # detector export) stay dynamic, as the conversion keeps them: there is no --input-shape here
    loaded = load_model(model, keep_dynamic=True)
    if loaded.external_data:  # OUTPUT (or OUTPUT.data) renamed over the weights the input reads
        check_weights_name(output)  # before the conversion, not when the model is saved
        written_files = [output, output.with_name(output.name + ".data")]
        refuse_replacing_weights(model, written_files, "give another -o/--output")
    written = write_fp16(model, output)
    if written == model:
        # -o holds the model to build in either case: "nothing written" with exit 0 left a script's
        # next step without OUTPUT, or building an older file of that name
        import onnx

        from deployopt.model import make_node_names_unique, save_model

        copy = onnx.load(str(model))
        make_node_names_unique(copy)
        save_model(copy, output, external_data=loaded.external_data)
        output_complete(output)
        console.print(
            f"{model} is already typed fp16/bf16: copied to {output} as it is (build it as it is)",
            highlight=False,
            soft_wrap=True,
        )
    else:
        output_complete(output)  # a Ctrl-C from here on (the line below) says it is complete
        import onnx

        # the input's, which the conversion keeps: reading OUTPUT back blocked forever on a pipe
        # (`-o >(cmd)`, /dev/stdout) that had already been written
        graph = loaded.model.graph
        io = {v.type.tensor_type.elem_type for v in (*graph.input, *graph.output)}
        kept = (
            "fp32 inputs and outputs"
            if io <= {onnx.TensorProto.FLOAT}
            else "inputs and outputs typed as before"
        )
        console.print(f"wrote {output} (fp16 inside, {kept})", highlight=False, soft_wrap=True)
