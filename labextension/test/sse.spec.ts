import { SseItem, SseParser } from '../src/sse';

function events(items: SseItem[]) {
  return items.filter(item => item.kind === 'event').map(item => item.value);
}

describe('SseParser', () => {
  it('reads the events the server writes: data lines, keep-alive comments and the end event', () => {
    const parser = new SseParser();
    const items = parser.push(
      'data: [worker-0] tick 0 0\n\n: keep-alive\n\ndata: [worker-1] tick 1 0\n\n' +
        'event: end\ndata: {"phase": "Succeeded", "reason": "Completed", "message": ""}\n\n'
    );
    expect(items).toEqual([
      { kind: 'event', value: { event: 'message', data: '[worker-0] tick 0 0' } },
      { kind: 'comment', value: 'keep-alive' },
      { kind: 'event', value: { event: 'message', data: '[worker-1] tick 1 0' } },
      { kind: 'event', value: { event: 'end', data: '{"phase": "Succeeded", "reason": "Completed", "message": ""}' } }
    ]);
  });

  it('gives the same events however the stream is cut into chunks, CRLF pairs included', () => {
    const text = 'data: one\r\n\r\ndata: two: with colon\r\n\r\n: hi\r\nevent: end\r\ndata: {}\r\n\r\n';
    const whole = events(new SseParser().push(text));
    expect(whole.map(e => e.data)).toEqual(['one', 'two: with colon', '{}']);
    for (let size = 1; size <= 7; size++) {
      const parser = new SseParser();
      const got = [];
      for (let i = 0; i < text.length; i += size) {
        got.push(...events(parser.push(text.slice(i, i + size))));
      }
      expect(got).toEqual(whole);
    }
  });

  it('joins several data lines with newlines, keeps spaces after the first, accepts bare CR', () => {
    const parser = new SseParser();
    expect(events(parser.push('data:a\rdata:  b\r\rdata\n\n'))).toEqual([
      { event: 'message', data: 'a\n b' },
      { event: 'message', data: '' }
    ]);
  });

  it('holds an unfinished event until its blank line and drops it if the stream ends first', () => {
    const parser = new SseParser();
    expect(parser.push('data: partial')).toEqual([]);
    expect(parser.push(' line\n')).toEqual([]);
    expect(events(parser.push('\n'))).toEqual([{ event: 'message', data: 'partial line' }]);
    expect(parser.push('data: cut off\n')).toEqual([]);
    parser.end();
    expect(parser.push('\n')).toEqual([]);
  });

  it('reports an id and resets the event type after each event', () => {
    const parser = new SseParser();
    expect(events(parser.push('id: 7\nevent: end\ndata: x\n\ndata: y\n\n'))).toEqual([
      { event: 'end', data: 'x', id: '7' },
      { event: 'message', data: 'y' }
    ]);
  });
});
