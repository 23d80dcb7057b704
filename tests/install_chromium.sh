#!/usr/bin/env bash
# Install what the report's browser test needs (tests/workflow/test_workflow.py, the report read in a
# browser): Debian's headless-capable Chromium. Idempotent; never fails: where Chromium cannot be
# installed (no root, no apt-get, no network), it says so and that test skips with the reason.
set -u
for name in chromium chromium-browser google-chrome; do
  command -v "$name" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium.sh: Chromium is not installed and cannot be (needs root and apt-get)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
  echo "install_chromium.sh: installed Chromium"
else
  echo "install_chromium.sh: apt-get could not install Chromium"
fi
exit 0
