#!/usr/bin/env bash
# Installs the Debian packages that the test suites drive (a browser, servers) when they are missing:
# part of `make test`'s own set-up, as the virtual environment is, so the README's two commands work
# on a bare machine. Each argument is a package whose command has the same name (chromium,
# redis-server). As root, or with passwordless sudo, it installs what is missing with apt-get;
# otherwise it stops before the suite with one line saying what to install.
set -euo pipefail

missing=()
for package in "$@"; do
  command -v "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "the tests need Debian's ${missing[*]}, which is not installed: run 'apt-get install ${missing[*]}' as root, then make test again" >&2
  exit 1
fi
echo "installing Debian's ${missing[*]} for the tests (apt-get)" >&2
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for package in "${missing[@]}"; do
  command -v "$package" >/dev/null 2>&1 || { echo "apt-get installed $package but no '$package' command is on PATH" >&2; exit 1; }
done
