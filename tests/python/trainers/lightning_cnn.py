"""PyTorch Lightning training a small CNN on a dataset held in host memory (a TensorDataset
of 15 000 images, 60 MiB): the Trainer moves each batch to the device; the dataset stays on
the host.

    python lightning_cnn.py [--batch 256] [--steps 3]
"""
import argparse
import os
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import pytorch_lightning as pl

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--steps", type=int, default=3)
args = ap.parse_args()
warnings.filterwarnings("ignore")
torch.manual_seed(0)


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))

    def training_step(self, batch, _):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


images = torch.randn(15_000, 1, 32, 32)
labels = torch.randint(0, 10, (15_000,))
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels), batch_size=args.batch, shuffle=True)
trainer = pl.Trainer(
    max_steps=args.steps,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=0,
)
trainer.fit(Net(), data)
print("trained", args.batch, flush=True)
