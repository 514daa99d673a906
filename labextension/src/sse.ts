/**
 * A parser for `text/event-stream` (the WHATWG "server-sent events" format), fed
 * with text chunks as they arrive from a fetch body. Pure: no I/O, no DOM.
 *
 * Chunks may split a line, or a `\r\n` pair, anywhere; comment lines (`: keep-alive`)
 * are reported as `comment` so a follower can tell a live but idle stream from a
 * dead one.
 */

export interface ISseEvent {
  /** The event type: `message` unless the server named one (`event: end`). */
  event: string;
  /** The data lines joined with `\n`. */
  data: string;
  /** The `id:` field, when the server sent one. */
  id?: string;
}

export type SseItem = { kind: 'event'; value: ISseEvent } | { kind: 'comment'; value: string };

export class SseParser {
  private buffer = '';
  private lastWasCR = false;
  private eventType = '';
  private dataLines: string[] = [];
  private hasData = false;
  private id: string | undefined;

  /** Feed a chunk; returns what it completed, in order. */
  push(chunk: string): SseItem[] {
    const items: SseItem[] = [];
    let text = chunk;
    if (this.lastWasCR && text.startsWith('\n')) {
      text = text.slice(1); // the second half of a "\r\n" split across chunks
    }
    this.lastWasCR = false;
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== 10 && c !== 13) {
        continue;
      }
      const line = this.buffer + text.slice(start, i);
      this.buffer = '';
      if (c === 13) {
        if (i + 1 < text.length) {
          if (text.charCodeAt(i + 1) === 10) {
            i++;
          }
        } else {
          this.lastWasCR = true;
        }
      }
      start = i + 1;
      this.line(line, items);
    }
    this.buffer += text.slice(start);
    return items;
  }

  /** The stream ended: an event without its closing blank line is dropped, as the spec says. */
  end(): void {
    this.buffer = '';
    this.reset();
  }

  private line(line: string, items: SseItem[]): void {
    if (line === '') {
      if (this.hasData) {
        const value: ISseEvent = { event: this.eventType || 'message', data: this.dataLines.join('\n') };
        if (this.id !== undefined) {
          value.id = this.id;
        }
        items.push({ kind: 'event', value });
      }
      this.reset();
      return;
    }
    if (line.startsWith(':')) {
      items.push({ kind: 'comment', value: line.slice(1).replace(/^ /, '') });
      return;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    switch (field) {
      case 'data':
        this.dataLines.push(value);
        this.hasData = true;
        break;
      case 'event':
        this.eventType = value;
        break;
      case 'id':
        this.id = value;
        break;
      default:
        break; // `retry` and unknown fields are ignored
    }
  }

  private reset(): void {
    this.eventType = '';
    this.dataLines = [];
    this.hasData = false;
    this.id = undefined;
  }
}
