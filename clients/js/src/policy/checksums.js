// The check digits the content detectors verify (serving/policy/_checksums.py): Luhn (payment cards),
// ISO 13616 mod 97 (IBANs), the Dutch BSN 11-test and the Spanish DNI / NIE control letter. None of
// them is cryptography.

/** ISO 13616 (SWIFT IBAN registry): country code -> total IBAN length. */
export const IBAN_LENGTHS = Object.freeze({
  AD: 24, AE: 23, AL: 28, AT: 20, AZ: 28, BA: 20, BE: 16, BG: 22, BH: 22, BR: 29,
  BY: 28, CH: 21, CR: 22, CY: 28, CZ: 24, DE: 22, DK: 18, DO: 28, EE: 20, EG: 29,
  ES: 24, FI: 18, FO: 18, FR: 27, GB: 22, GE: 22, GI: 23, GL: 18, GR: 27, GT: 28,
  HR: 21, HU: 28, IE: 22, IL: 23, IQ: 23, IS: 26, IT: 27, JO: 30, KW: 30, KZ: 20,
  LB: 28, LC: 32, LI: 21, LT: 20, LU: 20, LV: 21, LY: 25, MC: 27, MD: 24, ME: 22,
  MK: 19, MR: 27, MT: 31, MU: 30, NL: 18, NO: 15, PK: 24, PL: 28, PS: 29, PT: 25,
  QA: 29, RO: 24, RS: 22, SA: 24, SC: 31, SE: 24, SI: 19, SK: 24, SM: 27, ST: 25,
  SV: 28, TL: 23, TN: 24, TR: 26, UA: 29, VA: 22, VG: 24, XK: 20,
});

const DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE";  // the control letter of a DNI number n is DNI_LETTERS[n % 23]
const NIE_PREFIX = { X: "0", Y: "1", Z: "2" };

/** The Luhn (mod 10) check over a string of ASCII digits, the last one the check digit. */
export function luhnValid(digits) {
  let total = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) d = d > 4 ? d * 2 - 9 : d * 2;
    total += d;
  }
  return total % 10 === 0;
}

/** An IBAN in its compact uppercase form: its country's length and remainder 1 mod 97. */
export function ibanValid(iban) {
  // A space or dash inside is not an IBAN (it would count as a digit of -16 or -3).
  if (IBAN_LENGTHS[iban.slice(0, 2)] !== iban.length || !/^[0-9]{2}$/.test(iban.slice(2, 4)) || /[^A-Z0-9]/.test(iban)) return false;
  let remainder = 0;
  for (const ch of iban.slice(4) + iban.slice(0, 4)) {
    const code = ch.charCodeAt(0);
    const value = ch <= "9" ? code - 48 : code - 55;
    remainder = (remainder * (value > 9 ? 100 : 10) + value) % 97;
  }
  return remainder === 1;
}

/** The Dutch BSN 11-test over nine digits (and not 0). */
export function bsnValid(digits) {
  const weights = [9, 8, 7, 6, 5, 4, 3, 2, -1];
  let total = 0;
  for (let i = 0; i < Math.min(9, digits.length); i++) total += weights[i] * (digits.charCodeAt(i) - 48);
  return digits.length === 9 && total !== 0 && total % 11 === 0;
}

/** A Spanish DNI (eight digits) or NIE (X, Y or Z and seven digits) and its control letter. */
export function dniValid(number, letter) {
  if (number[0] in NIE_PREFIX) number = NIE_PREFIX[number[0]] + number.slice(1);
  if (!/^[0-9]+$/.test(number)) return false;
  return DNI_LETTERS[Number(BigInt(number) % 23n)] === letter.toUpperCase();
}
