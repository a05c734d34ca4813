#!/usr/bin/env bash
# A screenshot of a report's HTML page in headless Chromium (Debian's `chromium` package: apt-get install
# chromium), to see that every figure renders offline. Not a timed test.
#
#   bash benchmarks/report_screenshot.sh REPORT_DIR OUT.png [WIDTH=1280] [HEIGHT=6000]
#
# REPORT_DIR is what `lightning_bench report ... -o REPORT_DIR` wrote; OUT.png must not exist.
set -euo pipefail
page=$(cd "$1" && pwd)/report.html; out=$2; width=${3:-1280}; height=${4:-6000}
[ -f "$page" ] || { echo "report_screenshot: $page: no such file" >&2; exit 2; }
[ -e "$out" ] && { echo "report_screenshot: $out exists; name a new file" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "report_screenshot: no Chromium found (apt-get install chromium)" >&2; exit 2; }
# --no-sandbox: containers run as root, where Chromium's sandbox refuses to start; the page is a local file
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --allow-file-access-from-files \
    --window-size="$width,$height" --screenshot="$(realpath -m "$out")" "file://$page" 2>/dev/null
echo "wrote $out ($width x $height) of $page"
