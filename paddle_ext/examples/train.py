"""A small distributed PaddlePaddle training run on synthetic data (no download).

Every worker trains the same linear-regression model on its own shard of synthetic
data; gradients are averaged with a real all-reduce each step. The script first
checks a collective: the all-reduce of (rank + 1) over all ranks must equal
n * (n + 1) / 2, and it fails loudly when it does not.

    python -m paddle.distributed.launch --nnodes 2 ... train.py --epochs 3
"""

import argparse
import sys

import numpy as np
import paddle
import paddle.distributed as dist


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--exit-code", type=int, default=0,
                        help="exit with this code after training (to try failure handling)")
    parser.add_argument("--fail-rank", type=int, default=None,
                        help="only this rank exits with --exit-code")
    return parser.parse_args(argv)


def check_all_reduce(rank, world_size):
    value = paddle.to_tensor([float(rank + 1)])
    dist.all_reduce(value)
    expected = world_size * (world_size + 1) / 2
    got = float(value.numpy()[0])
    if got != expected:
        print(f"rank {rank}: all_reduce check FAILED: sum={got:g}, expected {expected:g}", flush=True)
        sys.exit(70)
    print(f"rank {rank}: all_reduce check ok: sum={got:g} over {world_size} workers", flush=True)


def synthetic_batch(rng, batch_size, true_w, true_b):
    x = rng.standard_normal((batch_size, true_w.shape[0])).astype("float32")
    noise = 0.01 * rng.standard_normal((batch_size, 1)).astype("float32")
    return x, x @ true_w + true_b + noise


def main(argv=None):
    args = parse_args(argv)
    if dist.get_world_size() > 1:
        dist.init_parallel_env()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}: started, world size {world_size}, device {paddle.device.get_device()}", flush=True)
    if world_size > 1:
        check_all_reduce(rank, world_size)

    paddle.seed(0)
    true_w = np.array([[2.0], [-3.0], [0.5], [1.0]], dtype="float32")
    true_b = 0.7
    rng = np.random.default_rng(1000 + rank)
    model = paddle.nn.Linear(4, 1)
    if world_size > 1:
        model = paddle.DataParallel(model)
    optimizer = paddle.optimizer.SGD(learning_rate=args.lr, parameters=model.parameters())

    for epoch in range(args.epochs):
        total = 0.0
        for _ in range(args.steps):
            x, y = synthetic_batch(rng, args.batch_size, true_w, true_b)
            loss = paddle.nn.functional.mse_loss(model(paddle.to_tensor(x)), paddle.to_tensor(y))
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            total += float(loss)
        print(f"rank {rank}: epoch {epoch + 1}/{args.epochs} loss {total / args.steps:.5f}", flush=True)

    print(f"rank {rank}: done", flush=True)
    if args.exit_code and (args.fail_rank is None or args.fail_rank == rank):
        print(f"rank {rank}: exiting with code {args.exit_code} as asked", flush=True)
        sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
