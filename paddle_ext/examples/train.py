"""A small distributed PaddlePaddle training run on synthetic data (no download).

Every worker trains the same linear-regression model on its own shard of synthetic
data; gradients are averaged with a real all-reduce each step. The script first
checks a collective: the all-reduce of (rank + 1) over all ranks must equal
n * (n + 1) / 2, and it fails loudly when it does not.

It resumes after a restart: every --checkpoint-every steps rank 0 saves the model and the
optimizer with paddle_ext.checkpoint, and a restarted job continues from the last one
(the data of each step depends only on the seed, the rank and the step, so a resumed run
ends where an uninterrupted one would).

    python -m paddle.distributed.launch --nnodes 2 ... train.py --epochs 3
"""

import argparse
import os
import sys
import time

import numpy as np
import paddle
import paddle.distributed as dist

from paddle_ext import checkpoint


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
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints (0: none)")
    parser.add_argument("--pause-at", type=int, default=None,
                        help="(to try restarts) in the first --pause-attempts attempts, at the first step "
                             "from this one on, write PAUSE_FILE.attempt<A>.rank<R> (holding the trainer's pid) "
                             "and wait until PAUSE_FILE exists")
    parser.add_argument("--pause-attempts", type=int, default=1)
    parser.add_argument("--pause-rank", type=int, default=None, help="only this rank pauses (default: all)")
    parser.add_argument("--pause-file", default=None)
    return parser.parse_args(argv)


def pause(args, rank, step, first):
    """Wait at --pause-at (or at the first step after it, in an attempt resumed past it)
    until --pause-file exists: a test's gate."""
    attempt = checkpoint.attempt()
    if not args.pause_file or args.pause_at is None or attempt >= args.pause_attempts:
        return
    if args.pause_rank is not None and args.pause_rank != rank:
        return
    if not (step == args.pause_at or (first and step > args.pause_at)):
        return
    marker = f"{args.pause_file}.attempt{attempt}.rank{rank}"
    with open(f"{marker}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(f"{marker}.tmp", marker)
    print(f"rank {rank}: paused at step {step}", flush=True)
    while not os.path.exists(args.pause_file):
        time.sleep(0.1)


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
    model = paddle.nn.Linear(4, 1)
    optimizer = paddle.optimizer.SGD(learning_rate=args.lr, parameters=model.parameters())
    start = checkpoint.resume(model, optimizer)  # 0 on the first attempt; the last checkpoint's step after a restart
    if world_size > 1:
        model = paddle.DataParallel(model)

    total_steps = args.epochs * args.steps
    total = 0.0
    for step in range(start, total_steps):
        rng = np.random.default_rng([1000 + rank, step])
        x, y = synthetic_batch(rng, args.batch_size, true_w, true_b)
        loss = paddle.nn.functional.mse_loss(model(paddle.to_tensor(x)), paddle.to_tensor(y))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        total += float(loss)
        done = step + 1
        if args.checkpoint_every and done % args.checkpoint_every == 0:
            checkpoint.save(model, optimizer, done)
        if done % args.steps == 0:
            counted = min(args.steps, done - start)
            print(f"rank {rank}: epoch {done // args.steps}/{args.epochs} step {done} loss {total / counted:.5f}",
                  flush=True)
            total = 0.0
        pause(args, rank, done, first=step == start)

    if rank == 0:
        paddle.save(getattr(model, "_layers", model).state_dict(),
                    os.path.join(os.environ.get("PADDLECLOUD_OUTPUT_DIR", "."), "final.pdparams"))
    print(f"rank {rank}: done", flush=True)
    if args.exit_code and (args.fail_rank is None or args.fail_rank == rank):
        print(f"rank {rank}: exiting with code {args.exit_code} as asked", flush=True)
        sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
