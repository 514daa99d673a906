/**
 * Kubernetes resource quantities ("500m", "4Gi", "2", "1e3"), parsed exactly as the
 * server's `paddle_ext/quantity.py` does (same grammar, same messages), into exact
 * fractions so that "16000m" and "16" compare equal.
 */

/** The grammar of `paddle_ext/grammars.json` (test/grammars.spec.ts checks they are the same). */
export const QUANTITY_PATTERN =
  /^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$/;
/** Exponents beyond this are out of any range (and would take the browser minutes to expand). */
export const MAX_EXPONENT_DIGITS = 3;

const TEN = BigInt(10);
const TWO = BigInt(2);

/** An exact non-negative amount: num / den. */
export interface IAmount {
  num: bigint;
  den: bigint;
}

const DECIMAL_EXPONENTS: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
const BINARY_EXPONENTS: Record<string, number> = { Ki: 10, Mi: 20, Gi: 30, Ti: 40, Pi: 50, Ei: 60 };

export class QuantityError extends Error {}

/** Parse a quantity; throws QuantityError with the server's sentence when it is not one. */
export function parseQuantity(text: string): IAmount {
  const match = QUANTITY_PATTERN.exec(text.trim());
  if (!match) {
    throw new QuantityError(`'${text}' is not a Kubernetes quantity (examples: 2, 500m, 4Gi)`);
  }
  const [, number, suffix] = match;
  const [whole, fraction = ''] = number.split('.');
  let num = BigInt((whole || '0') + fraction);
  let den = TEN ** BigInt(fraction.length);
  if (suffix) {
    let exponent: number;
    if (suffix in BINARY_EXPONENTS) {
      num *= TWO ** BigInt(BINARY_EXPONENTS[suffix]);
      exponent = 0;
    } else if (suffix in DECIMAL_EXPONENTS) {
      exponent = DECIMAL_EXPONENTS[suffix];
    } else {
      if (suffix.slice(1).replace(/^[-+]/, '').replace(/^0+/, '').length > MAX_EXPONENT_DIGITS) {
        throw new QuantityError(`'${text}' is out of the range of Kubernetes quantities`);
      }
      exponent = Number(suffix.slice(1)); // e3, E-2
    }
    if (exponent >= 0) {
      num *= TEN ** BigInt(exponent);
    } else {
      den *= TEN ** BigInt(-exponent);
    }
  }
  return { num, den };
}

/** -1, 0 or 1 as a is less than, equal to or more than b. */
export function compareAmounts(a: IAmount, b: IAmount): number {
  const left = a.num * b.den;
  const right = b.num * a.den;
  return left < right ? -1 : left > right ? 1 : 0;
}

/** The amount as a float, for bars and sums (not for checks). */
export function amountValue(a: IAmount): number {
  return Number(a.num) / Number(a.den);
}

/** A number of bytes as people read memory: "8Gi", "512Mi", "1.5Gi". */
export function formatMemory(bytes: number): string {
  const units: [string, number][] = [
    ['Ti', 2 ** 40],
    ['Gi', 2 ** 30],
    ['Mi', 2 ** 20],
    ['Ki', 2 ** 10]
  ];
  for (const [unit, size] of units) {
    if (bytes >= size) {
      return `${Math.round((bytes / size) * 100) / 100}${unit}`;
    }
  }
  return String(bytes);
}
