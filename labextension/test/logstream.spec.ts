import { ApiError } from '../src/errors';
import { FollowState, ILogLine, LogFollower, OpenStream, splitWorker, textChunks } from '../src/logstream';

/** An SSE body the way the server writes it, for the given merged-log lines. */
function sse(lines: string[], end?: string): string {
  return lines.map(line => `data: ${line}\n\n`).join('') + (end ? `event: end\ndata: ${end}\n\n` : '');
}

/** Chunks, then (optionally) a dropped connection. */
async function* body(chunks: string[], failWith?: Error): AsyncIterable<string> {
  for (const chunk of chunks) {
    yield chunk;
  }
  if (failWith) {
    throw failWith;
  }
}

interface IScript {
  chunks: string[];
  failWith?: Error;
  refuse?: Error;
}

/** A server that answers each connection from a script, and remembers how often it was asked. */
function scripted(connections: IScript[]): { open: OpenStream; opened: () => number } {
  let count = 0;
  const open: OpenStream = async () => {
    const script = connections[Math.min(count, connections.length - 1)];
    count++;
    if (script.refuse) {
      throw script.refuse;
    }
    return body(script.chunks, script.failWith);
  };
  return { open, opened: () => count };
}

function follow(workers: number, open: OpenStream, extra: Partial<ConstructorParameters<typeof LogFollower>[0]> = {}) {
  const lines: ILogLine[] = [];
  const states: FollowState[] = [];
  const ends: unknown[] = [];
  const follower = new LogFollower({
    workers,
    open,
    onLines: batch => lines.push(...batch),
    onEnd: end => ends.push(end),
    onState: state => states.push(state),
    retryDelays: [1],
    ...extra
  });
  return { follower, lines, states, ends };
}

describe('splitWorker', () => {
  it('takes the worker from the prefix only when the job has several workers', () => {
    expect(splitWorker('[worker-1] tick 1 0', 2)).toEqual({ worker: 1, text: 'tick 1 0' });
    expect(splitWorker('[worker-1] tick', 1)).toEqual({ worker: 0, text: '[worker-1] tick' });
    expect(splitWorker('no prefix', 3)).toEqual({ worker: 0, text: 'no prefix' });
  });
});

describe('LogFollower', () => {
  const w = (worker: number, i: number) => `[worker-${worker}] line ${worker}.${i}`;

  it('hands on every line once and stops at the end event', async () => {
    const { open, opened } = scripted([{ chunks: [sse([w(0, 0), w(1, 0), w(0, 1)], '{"phase": "Succeeded"}')] }]);
    const run = follow(2, open);
    await run.follower.start();
    expect(run.lines).toEqual([
      { worker: 0, text: 'line 0.0' },
      { worker: 1, text: 'line 1.0' },
      { worker: 0, text: 'line 0.1' }
    ]);
    expect(run.ends).toEqual([{ phase: 'Succeeded', reason: '', message: '' }]);
    expect(run.states[run.states.length - 1]).toBe('ended');
    expect(opened()).toBe(1);
  });

  it('resumes after a dropped connection without repeating or losing a line, per worker', async () => {
    // First connection: worker 0 wrote 2 lines, worker 1 one, then the connection drops
    // in the middle of an event. The server replays each worker's log from the start on
    // the next connection, interleaved differently, with lines written meanwhile.
    const first = sse([w(0, 0), w(1, 0), w(0, 1)]) + 'data: [worker-1] line 1.';
    const second = sse([w(1, 0), w(1, 1), w(0, 0), w(1, 2), w(0, 1), w(0, 2)]);
    const third = sse([w(0, 0), w(0, 1), w(0, 2), w(0, 3), w(1, 0), w(1, 1), w(1, 2)], '{"phase": "Succeeded"}');
    const { open, opened } = scripted([
      { chunks: [first], failWith: new TypeError('network error') },
      { chunks: [second] }, // closed without an end event: also a reason to come back
      { chunks: [third] }
    ]);
    const run = follow(2, open);
    await run.follower.start();
    expect(opened()).toBe(3);
    const texts = run.lines.map(line => `${line.worker}:${line.text}`);
    expect(texts).toEqual([
      '0:line 0.0',
      '1:line 1.0',
      '0:line 0.1',
      '1:line 1.1',
      '1:line 1.2',
      '0:line 0.2',
      '0:line 0.3'
    ]);
    expect(run.follower.received).toEqual([4, 3]);
    expect(run.states).toContain('reconnecting');
    expect(run.states[run.states.length - 1]).toBe('ended');
  });

  it('counts a one-worker job without prefixes and resumes it the same way', async () => {
    const { open } = scripted([
      { chunks: [sse(['a', 'b'])], failWith: new Error('dropped') },
      { chunks: [sse(['a', 'b', 'c'], '{"phase": "Failed"}')] }
    ]);
    const run = follow(1, open);
    await run.follower.start();
    expect(run.lines.map(line => line.text)).toEqual(['a', 'b', 'c']);
    expect(run.ends).toEqual([{ phase: 'Failed', reason: '', message: '' }]);
  });

  it('keeps trying while the server is away, and gives up at once on 404', async () => {
    const away = scripted([
      { chunks: [], refuse: new TypeError('Failed to fetch') },
      { chunks: [], refuse: new ApiError(503, 'backend_unavailable', 'The cluster cannot be reached.') },
      { chunks: [sse(['x'], '{}')] }
    ]);
    const run = follow(1, away.open);
    await run.follower.start();
    expect(away.opened()).toBe(3);
    expect(run.lines).toEqual([{ worker: 0, text: 'x' }]);

    const gone = scripted([{ chunks: [], refuse: new ApiError(404, 'not_found', "No job named 'x'.") }]);
    const failed: string[] = [];
    const follower = new LogFollower({
      workers: 1,
      open: gone.open,
      onLines: () => undefined,
      onState: (state, detail) => state === 'failed' && failed.push(detail),
      retryDelays: [1]
    });
    await follower.start();
    expect(gone.opened()).toBe(1);
    expect(failed).toEqual(["No job named 'x'."]);
  });

  it('drops a connection that stays silent past the idle timeout and reconnects', async () => {
    let count = 0;
    const open: OpenStream = async signal => {
      count++;
      if (count === 1) {
        return (async function* () {
          yield sse(['first']);
          await new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted'))));
        })();
      }
      return body([sse(['first', 'second'], '{}')]);
    };
    const run = follow(1, open, { idleTimeoutMs: 30 });
    await run.follower.start();
    expect(count).toBe(2);
    expect(run.lines.map(line => line.text)).toEqual(['first', 'second']);
  });

  it('stops when asked, even while waiting for a connection', async () => {
    const open: OpenStream = signal =>
      new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted'))));
    const run = follow(1, open);
    const done = run.follower.start();
    run.follower.stop();
    await done;
    expect(run.states[run.states.length - 1]).toBe('stopped');
  });

  it('decodes a byte stream whose chunks split multi-byte characters', async () => {
    const bytes = new TextEncoder().encode('data: größe ✓\n\n');
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const byte of bytes) {
          controller.enqueue(new Uint8Array([byte]));
        }
        controller.close();
      }
    });
    let text = '';
    for await (const chunk of textChunks(stream)) {
      text += chunk;
    }
    expect(text).toBe('data: größe ✓\n\n');
  });
});
