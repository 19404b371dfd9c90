"""Training steps of the loops people use, with no code change: Lightning's
Trainer or Hugging Face's Trainer runs STEPS optimizer steps of a small
model on the GPU; each must mark STEPS steps (the loops step PyTorch's
optimizer, whose global post-step hook gmem-prof registers).

    python3 trainer_steps.py lightning|hf OUTDIR
"""
import sys

import torch

STEPS = 12


def data(n=256):
    x = torch.randn(n, 64)
    return x, x.sum(dim=1, keepdim=True)


def run_lightning(out):
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    x, y = data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="gpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=out)
    trainer.fit(Model(), loader)


def run_hf(out):
    from transformers import Trainer, TrainingArguments

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

        def forward(self, x, labels=None):
            pred = self.net(x)
            return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}

    x, y = data()
    rows = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
    args = TrainingArguments(output_dir=out, max_steps=STEPS, per_device_train_batch_size=16,
                             report_to=[], save_strategy="no", logging_strategy="no",
                             disable_tqdm=True)
    Trainer(model=Model(), args=args, train_dataset=rows).train()


{"lightning": run_lightning, "hf": run_hf}[sys.argv[1]](sys.argv[2])
