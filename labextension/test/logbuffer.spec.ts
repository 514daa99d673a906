import { LogBuffer } from '../src/logbuffer';
import { ILogLine } from '../src/logstream';

function lines(count: number, workers: number): ILogLine[] {
  return Array.from({ length: count }, (_, i) => ({
    worker: i % workers,
    text: `step ${i} loss ${(1 / (i + 1)).toFixed(4)}`
  }));
}

describe('LogBuffer', () => {
  it('filters by worker and by search text, case-insensitively, and keeps the filter for new lines', () => {
    const buffer = new LogBuffer();
    buffer.append([
      { worker: 0, text: 'Epoch 1 loss 0.5' },
      { worker: 1, text: 'epoch 1 loss 0.6' },
      { worker: 1, text: 'WARNING slow' }
    ]);
    buffer.setFilter(1, '');
    expect(buffer.viewSlice(0, 10).map(l => l.text)).toEqual(['epoch 1 loss 0.6', 'WARNING slow']);
    buffer.setFilter(null, 'EPOCH');
    expect(buffer.viewSlice(0, 10).map(l => [l.index, l.worker])).toEqual([
      [0, 0],
      [1, 1]
    ]);
    buffer.setFilter(1, 'epoch');
    expect(
      buffer.append([
        { worker: 0, text: 'epoch 2' },
        { worker: 1, text: 'epoch 2' }
      ])
    ).toBe(1);
    expect(buffer.viewSlice(0, 10).map(l => l.index)).toEqual([1, 4]);
    buffer.setFilter(null, '');
    expect(buffer.viewLength).toBe(5);
    expect(buffer.workers()).toEqual([0, 1]);
  });

  it('writes the log as `paddlecloud logs` does, all of it or what the filter shows', () => {
    const buffer = new LogBuffer();
    expect(buffer.toText(true)).toBe('');
    buffer.append([
      { worker: 0, text: 'a' },
      { worker: 1, text: 'b' }
    ]);
    expect(buffer.toText(true)).toBe('[worker-0] a\n[worker-1] b\n');
    expect(buffer.toText(false)).toBe('a\nb\n');
    buffer.setFilter(1, '');
    expect(buffer.toText(true, true)).toBe('[worker-1] b\n');
  });

  // No time limit: on a loaded machine that is luck; jest's own timeout still stops a hang.
  it('takes 10^5 lines in batches and filters and slices them', () => {
    const buffer = new LogBuffer();
    const all = lines(100000, 4);
    for (let i = 0; i < all.length; i += 500) {
      buffer.append(all.slice(i, i + 500)); // as the follower hands them over
    }
    buffer.setFilter(3, 'loss 0.00');
    const filtered = buffer.viewLength;
    buffer.setFilter(null, '');
    const page = buffer.viewSlice(99950, 100050);
    expect(buffer.length).toBe(100000);
    expect(filtered).toBe(all.filter(l => l.worker === 3 && l.text.includes('loss 0.00')).length);
    expect(filtered).toBeGreaterThan(20000);
    expect(page).toHaveLength(50);
    expect(page[49]).toEqual({ index: 99999, worker: 3, text: all[99999].text });
    expect(buffer.longestLine).toBe(Math.max(...all.map(l => l.text.length)));
  });
});
