#!/bin/sh
# install-chromium.sh installs what the browser test (server/browser_test.go)
# needs from Debian: Chromium, which playwright-core drives (it never
# downloads a browser of its own), and a colour emoji font, without which
# the page's message-type icons (📢 ☑ 🚨) render as empty boxes in the
# screenshots. Idempotent: nothing happens when both are there.
# Run by `make deps`.
set -eu

CHROMIUM=/usr/bin/chromium
EMOJI_FONT=/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf

packages=""
[ -x "$CHROMIUM" ] || packages="chromium"
[ -f "$EMOJI_FONT" ] || packages="$packages fonts-noto-color-emoji"
if [ -z "$packages" ]; then
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-chromium.sh: missing$packages, and apt-get is not available:" >&2
	echo "  install Chromium (so that $CHROMIUM exists) and an emoji font with your system's package manager" >&2
	exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
	SUDO=""
elif command -v sudo >/dev/null 2>&1; then
	SUDO="sudo"
else
	echo "install-chromium.sh: missing$packages; installing needs root, and sudo is not available:" >&2
	echo "  run as root: apt-get update && apt-get install -y --no-install-recommends$packages" >&2
	exit 1
fi

echo "install-chromium.sh: installing Debian's$packages (for the browser test)" >&2
export DEBIAN_FRONTEND=noninteractive
# $packages is a list of words: split on purpose.
# shellcheck disable=SC2086
$SUDO apt-get update
# shellcheck disable=SC2086
$SUDO apt-get install -y --no-install-recommends $packages

if [ ! -x "$CHROMIUM" ]; then
	echo "install-chromium.sh: apt-get ran, but $CHROMIUM is still missing" >&2
	exit 1
fi
