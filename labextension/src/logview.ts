/**
 * The log viewer of a job view: virtualised rows (only the visible ones are in the
 * DOM, so 10^5 lines scroll smoothly), a worker filter, search, a follow toggle that
 * turns itself off when the user scrolls up (and on again at the bottom), and download.
 */

import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { h } from './dom';
import { LogBuffer } from './logbuffer';
import { ILogLine } from './logstream';

const OVERSCAN = 20;
const FALLBACK_ROW_HEIGHT = 18;
/** Browsers cap an element's height (about 3.3e7 px in Chromium); rows past that are not reachable by scrolling. */
const MAX_SPACER_PX = 3.0e7;

export class LogViewer extends Widget {
  readonly buffer = new LogBuffer();
  private readonly scroller: HTMLDivElement;
  private readonly spacer: HTMLDivElement;
  private readonly rows: HTMLDivElement;
  private readonly workerSelect: HTMLSelectElement;
  private readonly search: HTMLInputElement;
  private readonly followBox: HTMLInputElement;
  private readonly countNode: HTMLSpanElement;
  private readonly stateNode: HTMLSpanElement;
  private rowHeight = FALLBACK_ROW_HEIGHT;
  private follow = true;
  private lastTop = 0;
  private frame = 0;
  private searchTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly resizeObserver = new ResizeObserver(() => this.scheduleRender());

  constructor(
    private readonly jobName: string,
    private readonly workers: number
  ) {
    super();
    this.addClass('pc-LogViewer');

    this.workerSelect = h('select', { class: 'pc-WorkerFilter', title: 'Show the lines of one worker' });
    this.workerSelect.append(h('option', { attrs: { value: '' }, text: 'All workers' }));
    for (let i = 0; i < workers; i++) {
      this.workerSelect.append(h('option', { attrs: { value: String(i) }, text: `Worker ${i}` }));
    }
    this.workerSelect.disabled = workers < 2;
    this.workerSelect.addEventListener('change', () => this.applyFilter());

    this.search = h('input', { class: 'pc-LogSearch', attrs: { type: 'search', placeholder: 'Search the log' } });
    this.search.addEventListener('input', () => {
      clearTimeout(this.searchTimer);
      this.searchTimer = setTimeout(() => this.applyFilter(), 150);
    });

    this.followBox = h('input', { attrs: { type: 'checkbox' } });
    this.followBox.checked = true;
    this.followBox.addEventListener('change', () => this.setFollow(this.followBox.checked));
    const followLabel = h(
      'label',
      { class: 'pc-Follow', title: 'Keep the newest line in view; scrolling up turns this off' },
      this.followBox,
      'Follow'
    );

    const download = h('button', {
      class: 'jp-mod-styled pc-Download',
      text: 'Download',
      title: 'Save every line received so far'
    });
    download.addEventListener('click', () => this.download());

    this.countNode = h('span', { class: 'pc-LogCount' });
    this.stateNode = h('span', { class: 'pc-LogState' });
    this.spacer = h('div', { class: 'pc-LogViewer-spacer' });
    this.rows = h('div', { class: 'pc-LogViewer-rows' });
    this.scroller = h('div', { class: 'pc-LogViewer-scroller', attrs: { tabindex: '0' } }, this.spacer, this.rows);
    this.scroller.addEventListener('scroll', () => this.onScroll(), { passive: true });
    this.resizeObserver.observe(this.scroller);
    this.scroller.addEventListener(
      'wheel',
      event => {
        if (event.deltaY < 0 && this.follow) {
          this.setFollow(false); // scrolling up, even where nothing can move yet
        }
      },
      { passive: true }
    );

    this.node.append(
      h(
        'div',
        { class: 'pc-LogViewer-toolbar' },
        this.workerSelect,
        this.search,
        followLabel,
        download,
        this.countNode,
        this.stateNode
      ),
      this.scroller
    );
    this.updateCount();
  }

  get following(): boolean {
    return this.follow;
  }

  /** New lines from the follower. */
  append(lines: readonly ILogLine[]): void {
    this.buffer.append(lines);
    this.updateCount();
    this.scheduleRender();
  }

  /** What the log's connection is doing, in a few words. */
  setState(text: string, kind: 'live' | 'ended' | 'problem' | 'idle'): void {
    this.stateNode.textContent = text;
    this.stateNode.dataset.kind = kind;
  }

  setFollow(on: boolean): void {
    this.follow = on;
    this.followBox.checked = on;
    if (on) {
      this.scheduleRender();
    }
  }

  dispose(): void {
    cancelAnimationFrame(this.frame);
    clearTimeout(this.searchTimer);
    this.resizeObserver.disconnect();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    const probe = h('div', { class: 'pc-LogRow', text: 'M' });
    this.rows.append(probe);
    this.rowHeight = probe.offsetHeight || FALLBACK_ROW_HEIGHT;
    probe.remove();
    this.scheduleRender();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.scheduleRender();
  }

  private applyFilter(): void {
    const value = this.workerSelect.value;
    this.buffer.setFilter(value === '' ? null : Number(value), this.search.value);
    this.updateCount();
    this.scheduleRender();
  }

  private updateCount(): void {
    const total = this.buffer.length;
    const shown = this.buffer.viewLength;
    const all = `${total.toLocaleString()} line${total === 1 ? '' : 's'}`;
    this.countNode.textContent = shown === total ? all : `${shown.toLocaleString()} of ${all}`;
  }

  private onScroll(): void {
    const top = this.scroller.scrollTop;
    const atBottom = top + this.scroller.clientHeight >= this.scroller.scrollHeight - this.rowHeight / 2;
    if (atBottom) {
      if (!this.follow) {
        this.setFollow(true);
      }
    } else if (top < this.lastTop && this.follow) {
      this.setFollow(false); // the user scrolled up
    }
    this.lastTop = top;
    this.scheduleRender();
  }

  private scheduleRender(): void {
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.render();
      });
    }
  }

  private render(): void {
    if (!this.isVisible) {
      return;
    }
    const count = this.buffer.viewLength;
    const height = Math.min(count * this.rowHeight, MAX_SPACER_PX);
    this.spacer.style.height = `${height}px`;
    this.spacer.style.width = `${this.buffer.longestLine + 12}ch`;
    if (this.follow) {
      this.scroller.scrollTop = this.scroller.scrollHeight;
      this.lastTop = this.scroller.scrollTop;
    }
    const top = this.scroller.scrollTop;
    const first = Math.max(0, Math.floor(top / this.rowHeight) - OVERSCAN);
    const last = Math.min(count, Math.ceil((top + this.scroller.clientHeight) / this.rowHeight) + OVERSCAN);
    this.rows.style.transform = `translateY(${first * this.rowHeight}px)`;
    const query = this.buffer.filter.query;
    const nodes: HTMLElement[] = [];
    for (const line of this.buffer.viewSlice(first, last)) {
      const row = h('div', {
        class: 'pc-LogRow',
        attrs: { 'data-worker': String(line.worker), 'data-line': String(line.index + 1) }
      });
      if (this.workers > 1) {
        row.append(
          h('span', { class: `pc-LogRow-worker pc-mod-w${line.worker % 8}`, text: `[worker-${line.worker}]` }),
          ' '
        );
      }
      appendHighlighted(row, line.text, query);
      nodes.push(row);
    }
    this.rows.replaceChildren(...nodes);
  }

  private download(): void {
    const text = this.buffer.toText(this.workers > 1);
    const url = URL.createObjectURL(new Blob([text], { type: 'text/plain;charset=utf-8' }));
    const link = h('a', { attrs: { href: url, download: `${this.jobName}.log` } });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }
}

/** The text with each (case-insensitive) occurrence of `query` in a <mark>. */
function appendHighlighted(node: HTMLElement, text: string, query: string): void {
  if (!query) {
    node.append(text);
    return;
  }
  const lower = text.toLowerCase();
  let at = 0;
  for (let found = lower.indexOf(query); found >= 0; found = lower.indexOf(query, at)) {
    node.append(text.slice(at, found), h('mark', { text: text.slice(found, found + query.length) }));
    at = found + query.length;
  }
  node.append(text.slice(at));
}
