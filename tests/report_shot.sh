#!/bin/sh
# Renders a `kmrun report --html` page in headless Chromium.
#   tests/report_shot.sh PAGE.html SHOT.png
# Writes SHOT.png (1200x1600 screenshot) and prints two lines:
#   png_bytes N
#   svg_sizes WxH,WxH,...     (what the page's own script measured with getBoundingClientRect)
# Exit 0 when both worked, 3 when no Chromium is installed (the caller skips), 1 otherwise.
# CHROMIUM=/path/to/chrome picks the browser; else chromium, chromium-browser, google-chrome.
set -u
page=${1:?usage: report_shot.sh PAGE.html SHOT.png}
shot=${2:?usage: report_shot.sh PAGE.html SHOT.png}

browser=${CHROMIUM:-}
if [ -z "$browser" ]; then
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
  done
fi
if [ -z "$browser" ] || ! command -v "$browser" >/dev/null 2>&1; then
  echo "chromium not installed"
  exit 3
fi

case "$page" in /*) url="file://$page" ;; *) url="file://$(pwd)/$page" ;; esac
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# A private profile and no first-run work: nothing is fetched, nothing shared with a user profile.
flags="--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --no-default-browser-check
  --disable-extensions --disable-background-networking --disable-component-update --disable-sync
  --user-data-dir=$profile"

rm -f "$shot"
# shellcheck disable=SC2086
timeout 90 "$browser" $flags --window-size=1200,1600 --screenshot="$shot" "$url" >"$profile.log" 2>&1
if [ ! -s "$shot" ]; then
  echo "no screenshot from $browser:"; tail -20 "$profile.log"; rm -f "$profile.log"; exit 1
fi
echo "png_bytes $(wc -c <"$shot" | tr -d ' ')"

# shellcheck disable=SC2086
dom=$(timeout 90 "$browser" $flags --dump-dom "$url" 2>"$profile.log")
sizes=$(printf '%s' "$dom" | sed -n 's/.*data-svg-sizes="\([^"]*\)".*/\1/p' | head -1)
if [ -z "$sizes" ]; then
  echo "no data-svg-sizes in the DOM dumped by $browser:"; tail -20 "$profile.log"; rm -f "$profile.log"; exit 1
fi
rm -f "$profile.log"
echo "svg_sizes $sizes"
