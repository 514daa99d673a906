/** A small helper to build DOM nodes without HTML strings (so job text is never markup). */

type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: { class?: string; title?: string; attrs?: Record<string, string>; text?: string } = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (props.class) {
    node.className = props.class;
  }
  if (props.title) {
    node.title = props.title;
  }
  for (const [key, value] of Object.entries(props.attrs ?? {})) {
    node.setAttribute(key, value);
  }
  if (props.text !== undefined) {
    node.textContent = props.text;
  }
  for (const child of children) {
    if (child !== null && child !== undefined && child !== false) {
      node.append(child);
    }
  }
  return node;
}

/** The phase badge used everywhere a phase shows. */
export function phaseBadge(phase: string): HTMLSpanElement {
  return h('span', { class: `pc-Phase pc-Phase-${phase.toLowerCase()}`, text: phase });
}
