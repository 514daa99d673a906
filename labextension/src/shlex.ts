/**
 * Command lines as the launcher widget reads them: Python's `shlex.split` (POSIX
 * rules: quotes, backslashes) and `shlex.join` to show an argv back as text.
 */

export class SplitError extends Error {}

const WHITESPACE = /\s/;

/** Split like Python's `shlex.split(text)`; throws SplitError with shlex's reason. */
export function splitCommand(text: string): string[] {
  const args: string[] = [];
  let current = '';
  let inWord = false;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote === "'") {
      if (c === "'") {
        quote = null;
      } else {
        current += c;
      }
    } else if (quote === '"') {
      if (c === '"') {
        quote = null;
      } else if (c === '\\' && i + 1 < text.length && '\\"$`\n'.includes(text[i + 1])) {
        current += text[++i];
      } else if (c === '\\' && i + 1 >= text.length) {
        throw new SplitError('No closing quotation');
      } else {
        current += c;
      }
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === '\\') {
      if (i + 1 >= text.length) {
        throw new SplitError('No escaped character');
      }
      current += text[++i];
      inWord = true;
    } else if (WHITESPACE.test(c)) {
      if (inWord) {
        args.push(current);
        current = '';
        inWord = false;
      }
    } else {
      current += c;
      inWord = true;
    }
  }
  if (quote) {
    throw new SplitError('No closing quotation');
  }
  if (inWord) {
    args.push(current);
  }
  return args;
}

const SAFE = /^[\w@%+=:,./-]+$/;

/** Join like Python's `shlex.join(argv)`. */
export function joinCommand(argv: readonly string[]): string {
  return argv.map(arg => (arg === '' ? "''" : SAFE.test(arg) ? arg : `'${arg.replace(/'/g, `'"'"'`)}'`)).join(' ');
}
