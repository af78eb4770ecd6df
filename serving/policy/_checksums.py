"""The check digits the content detectors verify: Luhn (payment cards), ISO 13616 mod 97 (IBANs), the
Dutch BSN 11-test and the Spanish DNI / NIE control letter. Each takes the value's characters without
separators and answers whether they are consistent; none of them is cryptography."""

from __future__ import annotations

import re

# ISO 13616 (SWIFT IBAN registry): country code -> total IBAN length.
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25,
    "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip

_LUHN_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)  # a digit doubled, less 9 when over 9
DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"  # the control letter of a DNI number n is DNI_LETTERS[n % 23]
_NOT_ALNUM = re.compile(r"[^A-Z0-9]")  # in an IBAN's compact uppercase form
NIE_PREFIX = {"X": "0", "Y": "1", "Z": "2"}  # an NIE's leading letter stands for this digit


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check over a string of ASCII digits, the last one the check digit."""
    doubled = sum(_LUHN_DOUBLED[ord(ch) - 48] for ch in digits[-2::-2])  # every second digit from the right
    return (sum(ord(ch) - 48 for ch in digits[-1::-2]) + doubled) % 10 == 0


def iban_valid(iban: str) -> bool:
    """An IBAN in its compact uppercase form: its country's length and remainder 1 mod 97 after moving the
    first four characters to the end and reading letters as 10..35."""
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban[2:4].isdigit() or _NOT_ALNUM.search(iban):
        return False  # a space or dash inside is not an IBAN (it would count as a digit of -16 or -3)
    remainder = 0
    for ch in iban[4:] + iban[:4]:
        value = ord(ch) - 48 if ch <= "9" else ord(ch) - 55
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
    return remainder == 1


def bsn_valid(digits: str) -> bool:
    """The Dutch BSN 11-test over nine digits: 9*d1 + 8*d2 + ... + 2*d8 - d9 is a multiple of 11 (and not 0)."""
    weights = (9, 8, 7, 6, 5, 4, 3, 2, -1)
    total = sum(w * (ord(ch) - 48) for w, ch in zip(weights, digits))
    return len(digits) == 9 and total != 0 and total % 11 == 0


def dni_valid(number: str, letter: str) -> bool:
    """A Spanish DNI (eight digits) or NIE (X, Y or Z and seven digits) and its control letter."""
    if number[:1] in NIE_PREFIX:
        number = NIE_PREFIX[number[0]] + number[1:]
    return number.isascii() and number.isdigit() and DNI_LETTERS[int(number) % 23] == letter.upper()
