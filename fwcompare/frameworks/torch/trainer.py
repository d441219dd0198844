"""PyTorch end to end: Hugging Face ``Trainer``, as its users run it (issue 50).

``TrainingArguments`` carry the run's settings (``training_run.FitSettings``):
AdamW (``adamw_torch``) at a constant learning rate, no gradient clipping
(``max_grad_norm`` 0: the other frameworks clip none), evaluation every
``eval_every`` steps, nothing saved or reported. Two things differ from a
default ``Trainer``, both so that every framework trains on the same batches:
its sampler is the examples' shared order (``fwcompare.core.pipeline``), and its
collate function pads each batch in NumPy as the other frameworks' loaders
do. A callback keeps the run's clock (``training_run.FitLog``).
"""
from __future__ import annotations

import tempfile
import time

import numpy as np
import torch

from ...core.training_run import FitLog, FitSettings
from ...core.pipeline import Examples, epoch_batches
from . import FRAMEWORK
from .pipeline import Collate, Rows, workers


class _TrainerCollate(Collate):
    """The pipelines' padding (``Collate``), its batch as the dict Trainer
    hands the model."""

    def __call__(self, items):
        ids, mask, labels = super().__call__(items)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class _SharedOrder(torch.utils.data.Sampler):
    """The examples' order of each epoch (whole batches); ``set_epoch`` is how
    Trainer (through accelerate) says which."""

    def __init__(self, examples: Examples, batch_size: int):
        self.examples, self.batch_size, self.epoch = examples, batch_size, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self):
        return self.examples.batches(self.batch_size) * self.batch_size

    def __iter__(self):
        return iter(np.concatenate(epoch_batches(self.examples, self.batch_size,
                                                 self.epoch)).tolist())


def fit(load, train: Examples, held_out: Examples, weights_dir, device: str,
        settings: FitSettings, log: FitLog) -> list[dict]:
    """One run of ``Trainer``; ``load``: the backend's ``load``. Returns the
    evaluations (``log.evals``). ``settings.pipeline``: ``dataloader-wN``
    (Trainer's DataLoader with N workers; "": none)."""
    kind = settings.pipeline_in(FRAMEWORK.fit_pipelines, "Trainer, its own DataLoader,")
    settings.check_held_out(len(held_out))
    if device == "gpu" and torch.cuda.device_count() > 1:  # Trainer would use them all
        raise ValueError(f"Trainer spreads a batch over every visible GPU "
                         f"({torch.cuda.device_count()}): make one visible "
                         "(CUDA_VISIBLE_DEVICES) for the same batches as the others")
    with log.phase("data"):
        collate = _TrainerCollate(train.seq_len, train.pad_id)
        train_set, eval_set = Rows(train), Rows(held_out)
    try:
        with tempfile.TemporaryDirectory(prefix="fwcompare-trainer-") as out:  # nothing saved
            _train(load, train_set, eval_set, collate, train, weights_dir, device, settings,
                   log, out, workers(kind))
    finally:
        log.finished()
    return log.evals


def _train(load, train_set, eval_set, collate, train, weights_dir, device, settings, log,
           out, workers: int) -> None:
    import transformers

    opt = settings.optimizer
    with log.phase("setup"):
        model = load(weights_dir, device, "seq_cls")
        args = transformers.TrainingArguments(
            output_dir=out, per_device_train_batch_size=settings.batch_size,
            per_device_eval_batch_size=settings.eval_batch_size, max_steps=settings.max_steps,
            learning_rate=opt["learning_rate"], weight_decay=opt["weight_decay"],
            adam_beta1=opt["beta1"], adam_beta2=opt["beta2"], adam_epsilon=opt["eps"],
            optim="adamw_torch", lr_scheduler_type="constant", warmup_steps=0,
            max_grad_norm=0.0, eval_strategy="steps", eval_steps=settings.eval_every,
            logging_strategy="no", save_strategy="no", report_to="none",
            seed=settings.seed, data_seed=settings.seed, use_cpu=device == "cpu",
            dataloader_drop_last=True, dataloader_num_workers=workers,
            dataloader_pin_memory=device == "gpu", remove_unused_columns=False,
            disable_tqdm=True)
        trainer = _Trainer(model=model, args=args, train_dataset=train_set,
                           eval_dataset=eval_set, data_collator=collate,
                           compute_metrics=_accuracy, callbacks=[_Clock(log)])
        trainer.remove_callback(transformers.PrinterCallback)  # its metrics are log's
        trainer.fit_log, trainer.shared_order = log, _SharedOrder(train, settings.batch_size)
        trainer.agreement_steps = settings.agreement_steps
    log.training_begins()
    trainer.train()


def _accuracy(pred) -> dict:
    logits, labels = pred.predictions, pred.label_ids
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


class _Trainer:  # made a transformers.Trainer subclass on first use (imports it lazily)
    def __new__(cls, *args, **kwargs):
        import transformers

        class Trainer(transformers.Trainer):
            def _get_train_sampler(self, train_dataset=None):
                return self.shared_order

            def training_step(self, model, inputs, num_items_in_batch=None):
                loss = super().training_step(model, inputs, num_items_in_batch)
                if len(self.fit_log.losses) < self.agreement_steps:
                    self.fit_log.losses.append(float(loss.detach()))  # a sync: the first steps only
                return loss

        return Trainer(*args, **kwargs)


class _Clock:  # a transformers.TrainerCallback, made on first use
    def __new__(cls, log: FitLog):
        import transformers

        class Clock(transformers.TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step % args.eval_steps == 0 and torch.cuda.is_available():
                    torch.cuda.synchronize()  # the steps' GPU work: theirs, not the evaluation's
                log.step_done()
                self.step_end = log.step_ends[-1]

            def on_evaluate(self, args, state, control, metrics=None, **kw):
                log.evaluated(state.global_step, metrics["eval_accuracy"],
                              metrics["eval_loss"], time.perf_counter() - self.step_end)

        return Clock()
