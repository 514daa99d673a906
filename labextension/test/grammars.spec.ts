/**
 * The panel's grammars against their one definition, `paddle_ext/grammars.json`: the same
 * patterns, and the same cases the server (tests/unit/test_grammars.py) and the chart's
 * values schema pass.
 */
import { readFileSync } from 'fs';
import { join } from 'path';

import { ENV_NAME_PATTERN, MAX_NAME_LENGTH, NAME_PATTERN } from '../src/jobform';
import { MAX_EXPONENT_DIGITS, QUANTITY_PATTERN, compareAmounts, parseQuantity } from '../src/quantity';

interface IGrammar {
  pattern: string;
  accepted: string[];
  refused: string[];
}

const GRAMMARS = JSON.parse(readFileSync(join(__dirname, '..', '..', 'paddle_ext', 'grammars.json'), 'utf8'));
const QUANTITY = GRAMMARS.quantity as IGrammar & {
  accepted: Record<string, string>;
  out_of_range: string[];
  max_exponent_digits: number;
};

describe('the quantity grammar', () => {
  it('is the shared one', () => {
    expect(QUANTITY_PATTERN.source).toBe(QUANTITY.pattern);
    expect(MAX_EXPONENT_DIGITS).toBe(QUANTITY.max_exponent_digits);
  });

  it.each(Object.entries(QUANTITY.accepted))('reads %j as %s', (text, amount) => {
    expect(compareAmounts(parseQuantity(text), parseQuantity(amount))).toBe(0);
  });

  it.each(QUANTITY.refused)('refuses %j', text => {
    expect(QUANTITY_PATTERN.test(text)).toBe(false);
    if (text.trim() === text) {
      // (the form trims what is typed around a quantity, as the server's parse does)
      expect(() => parseQuantity(text)).toThrow('is not a Kubernetes quantity');
    }
  });

  it.each(QUANTITY.out_of_range)('refuses %j as out of range', text => {
    expect(QUANTITY_PATTERN.test(text)).toBe(true);
    expect(() => parseQuantity(text)).toThrow(`'${text}' is out of the range of Kubernetes quantities`);
  });
});

describe.each([
  ['job names', NAME_PATTERN, GRAMMARS.job_name as IGrammar],
  ['environment variable names', ENV_NAME_PATTERN, GRAMMARS.env_name as IGrammar]
])('the grammar of %s', (_what, pattern, grammar) => {
  it('is the shared one', () => {
    expect(pattern.source).toBe(grammar.pattern);
  });

  it('accepts and refuses the shared cases', () => {
    expect(grammar.accepted.filter(text => !pattern.test(text))).toEqual([]);
    expect(grammar.refused.filter(text => pattern.test(text))).toEqual([]);
  });
});

it('limits job names as the server does', () => {
  expect(MAX_NAME_LENGTH).toBe(GRAMMARS.job_name.max_length);
});
