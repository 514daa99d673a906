/**
 * Every log line a job view has received, and the subset the user is looking at
 * (one worker, lines containing a search text). Pure; sized for 10^5+ lines: appending
 * filters only the new lines, and the viewer asks for just the rows it draws.
 */

import { ILogLine } from './logstream';

export interface IViewLine extends ILogLine {
  /** The line's position among all lines (0-based). */
  index: number;
}

export class LogBuffer {
  private readonly texts: string[] = [];
  private readonly workerOf: number[] = [];
  private view: number[] = [];
  private worker: number | null = null;
  private query = '';
  private longest = 0;

  /** All lines received. */
  get length(): number {
    return this.texts.length;
  }

  /** Lines that pass the filter. */
  get viewLength(): number {
    return this.view.length;
  }

  /** Characters in the longest line received (the viewer's scroll width). */
  get longestLine(): number {
    return this.longest;
  }

  get filter(): { worker: number | null; query: string } {
    return { worker: this.worker, query: this.query };
  }

  /** Add lines; returns how many of them pass the filter. */
  append(lines: readonly ILogLine[]): number {
    let shown = 0;
    for (const line of lines) {
      const index = this.texts.length;
      this.texts.push(line.text);
      this.workerOf.push(line.worker);
      if (line.text.length > this.longest) {
        this.longest = line.text.length;
      }
      if (this.passes(index)) {
        this.view.push(index);
        shown++;
      }
    }
    return shown;
  }

  /** Show one worker (null: all) and lines containing `query` (case-insensitive; empty: all). */
  setFilter(worker: number | null, query: string): void {
    this.worker = worker;
    this.query = query.toLowerCase();
    if (worker === null && !this.query) {
      this.view = Array.from({ length: this.texts.length }, (_, i) => i);
      return;
    }
    const view: number[] = [];
    for (let i = 0; i < this.texts.length; i++) {
      if (this.passes(i)) {
        view.push(i);
      }
    }
    this.view = view;
  }

  /** Rows `from` (inclusive) to `to` (exclusive) of the filtered view. */
  viewSlice(from: number, to: number): IViewLine[] {
    const rows: IViewLine[] = [];
    const end = Math.min(to, this.view.length);
    for (let i = Math.max(0, from); i < end; i++) {
      const index = this.view[i];
      rows.push({ index, worker: this.workerOf[index], text: this.texts[index] });
    }
    return rows;
  }

  /** The workers that have written lines so far, in order. */
  workers(): number[] {
    return Array.from(new Set(this.workerOf)).sort((a, b) => a - b);
  }

  /**
   * The lines as a text file, in the order received: with `prefixWorkers`, each line
   * carries `[worker-I] ` as `paddlecloud logs` prints it; `onlyView` keeps the filter.
   */
  toText(prefixWorkers: boolean, onlyView = false): string {
    const indexes = onlyView ? this.view : null;
    const count = indexes ? indexes.length : this.texts.length;
    const out: string[] = new Array(count);
    for (let i = 0; i < count; i++) {
      const index = indexes ? indexes[i] : i;
      out[i] = prefixWorkers ? `[worker-${this.workerOf[index]}] ${this.texts[index]}` : this.texts[index];
    }
    return count ? out.join('\n') + '\n' : '';
  }

  private passes(index: number): boolean {
    if (this.worker !== null && this.workerOf[index] !== this.worker) {
      return false;
    }
    return !this.query || this.texts[index].toLowerCase().includes(this.query);
  }
}
