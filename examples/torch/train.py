"""A ResNet trained on synthetic images, for `oomscope run` on a GPU (scripts/gpu-check.sh).

It starts at a batch size that does not fit and halves it on an OOM, the way accelerate's
`find_executable_batch_size` does: with oomscope the OOM arrives as
`torch.cuda.OutOfMemoryError` (a `RuntimeError` whose text starts "CUDA out of memory."), so
this `except` runs, the report and the dump are written, and training goes on.

    oomscope run -- python examples/torch/train.py --batch 4096 --steps 20
"""
import argparse
import json
import sys
import time

import torch
import torch.nn as nn


def resnet():
    try:
        import torchvision

        return torchvision.models.resnet50(num_classes=1000), "torchvision resnet50"
    except Exception:
        return _small_resnet(), "a ResNet-50-like network (torchvision is not installed)"


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = mid * 4
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        return self.relu(self.bn3(self.conv3(x)) + idt)


def _small_resnet():
    layers, cin = [], 64
    for mid, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        stage = []
        for i in range(blocks):
            stage.append(Bottleneck(cin, mid, stride if i == 0 else 1))
            cin = mid * 4
        layers.append(nn.Sequential(*stage))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4096, help="the first batch size tried")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--image", type=int, default=224)
    args = ap.parse_args()
    assert torch.cuda.is_available(), "this example needs a CUDA GPU"
    model, what = resnet()
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    print(json.dumps({"model": what, "gpu": torch.cuda.get_device_name(0)}), flush=True)

    batch = args.batch
    while batch >= 1:
        try:
            t0 = time.time()
            for _ in range(args.steps):
                x = torch.randn(batch, 3, args.image, args.image, device="cuda")
                y = torch.randint(0, 1000, (batch,), device="cuda")
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            torch.cuda.synchronize()
            print(json.dumps({"trained_at_batch": batch, "steps": args.steps, "seconds": round(time.time() - t0, 2)}), flush=True)
            return 0
        except torch.cuda.OutOfMemoryError as e:
            print(json.dumps({"oom_at_batch": batch, "error": str(e)[:120], "halving_to": batch // 2}), flush=True)
            x = y = loss = None
            batch //= 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
