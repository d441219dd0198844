"""PyTorch's deployment paths (``Framework.deploy_paths``): its exporter
(TorchScript, ONNX with the dynamo exporter, fusions and INT8, dynamic INT8)
and the runtime of its own artifact kind (TorchScript). torch is imported
where used."""
from __future__ import annotations

from pathlib import Path

from .. import head_output
from ..export import Exporter, Runtime

class TorchExporter(Exporter):
    def module(self, model=None):
        import torch

        head = self.job.head

        class Output(torch.nn.Module):  # a tensor out, for tracers and exporters
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                return head_output(self.m(input_ids=input_ids), head)
        return Output(model if model is not None else self.model).eval()

    def ids(self):
        import torch

        return torch.as_tensor(self.example, dtype=torch.long)

    def _trace(self, module, out: Path) -> None:
        import torch

        with torch.no_grad():
            traced = torch.jit.trace(module, (self.ids(),), check_trace=False)
        traced.save(str(out / "model.pt"))

    def export_torchscript(self, out):
        self._trace(self.module(), out)
        return "torch.jit.trace on the gate batch, torch.jit.save"

    def export_dynamic_int8(self, out):
        import copy
        import warnings

        import torch

        with warnings.catch_warnings():  # torch.ao.quantization is deprecated in 2.13
            warnings.simplefilter("ignore")
            q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(self.model),
                                                       {torch.nn.Linear}, dtype=torch.qint8)
            self._trace(self.module(q), out)
        return (f"quantize_dynamic(Linear, qint8, engine {torch.backends.quantized.engine}), "
                "torch.jit.trace, torch.jit.save")

    def onnx(self) -> Path:
        """The dynamo exporter's ONNX model (batch and sequence dynamic)."""
        def make(d: Path) -> Path:
            import torch

            batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
            torch.onnx.export(self.module(), (self.ids(),), str(d / "model.onnx"), dynamo=True,
                              input_names=["input_ids"], output_names=["output"],
                              dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                              opset_version=self.job.params["onnx_opset"],
                              external_data=False, verbose=False)
            return d / "model.onnx"
        return self.step("onnx", make)

    def fused(self) -> Path:
        """The ONNX model after ONNX Runtime's transformer optimizer."""
        def make(d: Path) -> Path:
            from onnxruntime.transformers.optimizer import optimize_model

            kind = ORT_MODEL_TYPES.get(self.model.config.model_type, "bert")
            opt = optimize_model(str(self.onnx()), model_type=kind, num_heads=0, hidden_size=0,
                                 opt_level=0)
            opt.save_model_to_file(str(d / "model.onnx"))
            fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
            self.fusions = (f"optimizer model_type {kind}: " + (", ".join(
                f"{k} {v}" for k, v in fused.items()) or "no fusion applied"))
            return d / "model.onnx"
        return self.step("fused", make)

    def export_onnxruntime(self, out):
        import shutil

        shutil.copy(self.onnx(), out / "model.onnx")
        return f"torch.onnx.export(dynamo=True, opset {self.job.params['onnx_opset']})"

    def export_onnxruntime_fused(self, out):
        import shutil

        shutil.copy(self.fused(), out / "model.onnx")
        return self.fusions

    def export_onnxruntime_int8(self, out):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(self.fused()), str(out / "model.onnx"), weight_type=QuantType.QInt8)
        return f"{self.fusions}; quantize_dynamic(weight_type QInt8)"


# onnxruntime.transformers.optimizer's model types, by transformers' model_type.
ORT_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "distilbert": "bert", "gpt2": "gpt2",
                   "bart": "bart", "t5": "t5", "vit": "vit"}


class TorchScript(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import torch

        self.torch, self.device = torch, "cuda" if device == "gpu" else "cpu"
        self.module = torch.jit.load(str(path / "model.pt"), map_location=self.device).eval()
        self.setup = f"torch.jit.load, torch {torch.__version__}, {torch.get_num_threads()} threads"

    def inputs(self, ids):
        return self.torch.as_tensor(ids, dtype=self.torch.long, device=self.device)

    def run(self, x):
        with self.torch.inference_mode():
            return self.module(x)
