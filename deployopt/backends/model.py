"""The analytic wave model used as a backend: predicted latency, never measured.

It lets `deployopt optimize` run end to end on a machine with no GPU (CI, a laptop preparing a plan
for a Jetson): every Timing it returns has measured=False and names the model, so reports say
"predicted by the wave model, not measured". Latency of a model = Σ over its convs of the wave
model's prediction + a small fixed cost per other node (launch overhead; it does not depend on
widths, so it never changes a decision).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deployopt.backends.base import Backend, MeasureOptions, Session
from deployopt.errors import DeployoptError, ModelError, reraise_interrupt
from deployopt.layers import ConvShape, conv_shape_from_onnx
from deployopt.timing import Timing

NODE_COST_US = 1.0  # per non-conv node: kernel launch, roughly, on a GPU with CUDA graphs


def conv_shapes_from_model(model: Any) -> dict[str, ConvShape]:
    """ConvShape of every Conv node, read from inferred shapes (the model must have static shapes)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    dims: dict[str, list[int]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            dims[vi.name] = [d.dim_value for d in t.shape.dim]
    weights = {t.name: list(t.dims) for t in inferred.graph.initializer}
    out: dict[str, ConvShape] = {}
    for i, node in enumerate(inferred.graph.node):
        if node.op_type != "Conv":
            continue
        x = dims.get(node.input[0])
        w = weights.get(node.input[1]) or dims.get(node.input[1])
        if not x or len(x) != 4 or not w or len(w) != 4 or min(x) < 1:
            raise ModelError(f"conv {node.name or i}: needs static 4-D input and weight shapes")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        out[node.name or f"conv{i}"] = conv_shape_from_onnx(x, w, attrs)
    return out


def resolve_target(target: Any, sms: int | None) -> Any:
    """A Target from a name or a Target, with its SM count replaced when `sms` is given."""
    from deployopt.targets import get_target

    if target is None:
        raise DeployoptError(
            "backend 'model' needs a target: it predicts for a GPU (MeasureOptions.extra['target'], "
            "--target NAME in optimize)"
        )
    if isinstance(target, str):
        return get_target(target, sms=sms)
    if sms is not None and target.sms != sms:
        return target.with_sms(sms)
    return target


class WaveModelSession(Session):
    def __init__(self, backend: WaveModelBackend, options: MeasureOptions) -> None:
        super().__init__(backend, options)
        self.target = resolve_target(options.extra.get("target"), options.sms)
        params = self.target.wave_params(options.dtype)
        sms = f"{self.target.sms} SM" + ("s" if self.target.sms != 1 else "")
        self.predictor = f"wave model {params.name} ({self.target.name}, {sms})"

    def _environment(self) -> dict[str, Any]:
        return {
            "device": f"wave model of {getattr(self.target, 'name', 'target')}",
            "target": getattr(self.target, "name", None),
            "sms": self.target.sms,
            "predictor": self.predictor,
        }

    def _timing(self, value: float, timed: str) -> Timing:
        return Timing(
            backend="model",
            samples_us=[float(value)],
            timed=timed,
            environment=self._environment(),
            measured=False,
            predictor=self.predictor,
        )

    def predict_conv(self, shape: ConvShape) -> float:
        from deployopt.waves import predict

        return float(predict(shape, self.target, self.options.dtype).predicted_us)

    def measure(self, model_path: Path) -> Timing:
        from deployopt.backends.ort import prepare_model

        loaded = prepare_model(model_path, self.options.batch, self.options.input_shapes)
        shapes = conv_shapes_from_model(loaded.model)
        return self.predict_shapes(list(shapes.values()), len(loaded.model.graph.node) - len(shapes))

    def predict_shapes(self, shapes: list[ConvShape], other_nodes: int) -> Timing:
        """What `measure` returns for a model with these convs and `other_nodes` other nodes, without
        building it: the optimizer evaluates plans this way (same number, no surgery, no file)."""
        total = sum(self.predict_conv(s) for s in shapes) + NODE_COST_US * other_nodes
        return self._timing(total, f"Σ wave-model conv predictions + {NODE_COST_US} µs per other node")

    def measure_convs(self, shapes: list[ConvShape]) -> list[Timing]:
        return [self._timing(self.predict_conv(s), "wave-model prediction of one conv") for s in shapes]


class WaveModelBackend(Backend):
    name = "model"
    description = "the analytic wave model (predicted latency, nothing is run)"
    dtypes = ("fp32", "fp16", "int8")
    can_limit_sms = True
    measured = False

    def availability(self) -> tuple[bool, str]:
        try:
            import deployopt.targets  # noqa: F401
            from deployopt.waves import predict  # noqa: F401
        except ImportError as exc:
            reraise_interrupt(exc)
            return False, f"wave model not importable: {exc}"
        return True, "predicts from the target's SM count and limits; measures nothing"

    def open(self, options: MeasureOptions) -> Session:
        self.check_options(options)
        return WaveModelSession(self, options)
