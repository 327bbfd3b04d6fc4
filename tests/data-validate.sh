#!/usr/bin/env bash
# Validates the desktop integration files and the translation setup in the
# source tree (no build needed), printing TAP.
#
#   tests/data-validate.sh [SOURCE_ROOT [VERSION]]
#
# VERSION defaults to the version in SOURCE_ROOT/meson.build.
#
# Checks: desktop-file-validate on the launcher, appstreamcli on the metainfo,
# the icons (well-formed, render with rsvg-convert, symbolic icon is one
# colour, no editor metadata), that the names, version and icon agree across
# files, that po/POTFILES.in lists exactly the existing files with translatable
# strings, that xgettext extracts them, and that every language in LINGUAS has
# a .po file that msgfmt --check accepts. A check whose tool is missing is
# reported as skipped.

set -u

src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
app_id=io.github.unmask.Unmask
desktop_in=$src/data/$app_id.desktop.in
metainfo_in=$src/data/$app_id.metainfo.xml.in
icon=$src/data/icons/hicolor/scalable/apps/$app_id.svg
symbolic=$src/data/icons/hicolor/symbolic/apps/$app_id-symbolic.svg

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

n=0
failed=0

ok () { n=$((n + 1)); echo "ok $n - $1"; }
not_ok () { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }
skip () { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
have () { command -v "$1" >/dev/null 2>&1; }
# Runs "$@" quietly; on failure shows its output as TAP diagnostics.
check () {
  local desc=$1; shift
  if "$@" >"$tmp/out" 2>&1; then ok "$desc"; else not_ok "$desc"; sed 's/^/# /' "$tmp/out"; fi
}

# --- desktop file -----------------------------------------------------------
# The .in file holds no template variables; merge_file only adds translations.
if have desktop-file-validate; then
  cp "$desktop_in" "$tmp/$app_id.desktop"
  check "desktop-file-validate $app_id.desktop.in" desktop-file-validate "$tmp/$app_id.desktop"
else
  skip "desktop-file-validate $app_id.desktop.in" "desktop-file-validate not found"
fi

desktop_key () { sed -n "s/^$1=//p" "$desktop_in" | head -n 1; }
if [ "$(desktop_key Icon)" = "$app_id" ] && [ -f "$icon" ]; then
  ok "desktop Icon= names the installed icon"
else
  not_ok "desktop Icon= names the installed icon (Icon=$(desktop_key Icon))"
fi
case $(desktop_key Exec) in
  unmask|unmask\ *) ok "desktop Exec= runs unmask" ;;
  *) not_ok "desktop Exec= runs unmask (Exec=$(desktop_key Exec))" ;;
esac

# --- metainfo ---------------------------------------------------------------
if have appstreamcli; then
  cp "$metainfo_in" "$tmp/$app_id.metainfo.xml"
  check "appstreamcli validate --no-net $app_id.metainfo.xml.in" \
    appstreamcli validate --no-net --explain "$tmp/$app_id.metainfo.xml"
else
  skip "appstreamcli validate $app_id.metainfo.xml.in" "appstreamcli not found"
fi

if grep -q "<id>$app_id</id>" "$metainfo_in" \
   && grep -q "<launchable type=\"desktop-id\">$app_id.desktop</launchable>" "$metainfo_in"; then
  ok "metainfo id and launchable match the application id"
else
  not_ok "metainfo id and launchable match the application id"
fi

version=${2:-$(grep -oE "version: *'[^']*'" "$src/meson.build" | head -n 1 | sed "s/.*'\(.*\)'/\1/")}
if [ -n "$version" ] && grep -q "<release version=\"$version\"" "$metainfo_in"; then
  ok "metainfo has a release entry for version $version"
else
  not_ok "metainfo has a release entry for the project version ('$version')"
fi

# --- icons ------------------------------------------------------------------
for f in "$icon" "$symbolic"; do
  name=${f#"$src"/}
  if [ ! -f "$f" ]; then
    not_ok "$name exists"
    continue
  fi
  if have xmllint; then
    check "$name is well-formed XML" xmllint --noout "$f"
  elif have python3; then
    check "$name is well-formed XML" python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' "$f"
  else
    skip "$name is well-formed XML" "neither xmllint nor python3 found"
  fi
  if grep -qiE 'sodipodi|inkscape:|<metadata|xmlns:rdf' "$f"; then
    not_ok "$name has no editor metadata"
  else
    ok "$name has no editor metadata"
  fi
done

if have rsvg-convert; then
  for size in 128 64 32; do
    check "app icon renders at ${size}px" rsvg-convert -w "$size" -h "$size" -o "$tmp/icon-$size.png" "$icon"
  done
  check "symbolic icon renders at 16px" rsvg-convert -w 16 -h 16 -o "$tmp/symbolic-16.png" "$symbolic"
else
  skip "icons render" "rsvg-convert not found"
fi

# The app icon is drawn on a 128x128 canvas, the symbolic one on 16x16.
if grep -q 'viewBox="0 0 128 128"' "$icon" && grep -q 'viewBox="0 0 16 16"' "$symbolic"; then
  ok "icon canvases are 128x128 and 16x16"
else
  not_ok "icon canvases are 128x128 and 16x16"
fi

# Symbolic icons are recoloured by GTK: only #2e3436 (or currentColor) allowed.
colours=$(grep -oiE '#[0-9a-f]{6}\b|#[0-9a-f]{3}\b|rgba?\([^)]*\)' "$symbolic" | tr 'A-F' 'a-f' | sort -u | grep -v '^#2e3436$')
if [ -z "$colours" ]; then
  ok "symbolic icon uses only #2e3436"
else
  not_ok "symbolic icon uses only #2e3436 (also: $(echo $colours))"
fi

# --- translations -----------------------------------------------------------
potfiles=$src/po/POTFILES.in
listed=$(grep -vE '^[[:space:]]*(#|$)' "$potfiles" | sort)

missing=""
for f in $listed; do
  [ -f "$src/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then
  ok "every file in POTFILES.in exists"
else
  not_ok "every file in POTFILES.in exists (missing:$missing)"
fi

unlisted=""
cd "$src" || exit 1
for f in $(grep -lE '\b(N?C?_|g_dgettext|g_dngettext|ngettext)[[:space:]]*\(' app/*.c ui/*.c 2>/dev/null) \
         $(grep -lE 'translatable="(yes|true)"' resources/ui/*.ui 2>/dev/null); do
  echo "$listed" | grep -qxF "$f" || unlisted="$unlisted $f"
done
cd - >/dev/null || exit 1
if [ -z "$unlisted" ]; then
  ok "every source file with translatable strings is in POTFILES.in"
else
  not_ok "every source file with translatable strings is in POTFILES.in (not listed:$unlisted)"
fi

if have xgettext; then
  # The same keywords as meson's i18n.gettext(preset: 'glib').
  existing=$(for f in $listed; do [ -f "$src/$f" ] && echo "$f"; done)
  echo "$existing" > "$tmp/POTFILES"
  check "xgettext extracts the strings from POTFILES.in" \
    xgettext --package-name=unmask --from-code=UTF-8 --add-comments \
      --keyword=_ --keyword=N_ --keyword=C_:1c,2 --keyword=NC_:1c,2 \
      --keyword=g_dcgettext:2 --keyword=g_dngettext:2,3 --keyword=g_dpgettext2:2c,3 \
      --flag=N_:1:pass-c-format --flag=C_:2:pass-c-format --flag=NC_:2:pass-c-format \
      --flag=g_dngettext:2:pass-c-format --flag=g_strdup_printf:1:c-format \
      --flag=g_string_printf:2:c-format --flag=g_string_append_printf:2:c-format \
      --flag=g_error_new:3:c-format --flag=g_set_error:4:c-format \
      --flag=g_markup_printf_escaped:1:c-format --flag=g_log:3:c-format \
      --flag=g_print:1:c-format --flag=g_printerr:1:c-format --flag=g_printf:1:c-format \
      --flag=g_fprintf:2:c-format --flag=g_sprintf:2:c-format --flag=g_snprintf:3:c-format \
      -D "$src" -f "$tmp/POTFILES" -o "$tmp/unmask.pot"
  for s in "Unmask" "Diffusion Language Model Runner"; do
    if grep -qxF "msgid \"$s\"" "$tmp/unmask.pot" 2>/dev/null; then
      ok "unmask.pot contains \"$s\""
    else
      not_ok "unmask.pot contains \"$s\""
    fi
  done
else
  skip "xgettext extracts the strings from POTFILES.in" "xgettext not found"
fi

languages=$(grep -vE '^[[:space:]]*(#|$)' "$src/po/LINGUAS" | tr -s ' \t' '\n' | grep -v '^$')
if [ -z "$languages" ]; then
  skip "po files for LINGUAS" "LINGUAS lists no language yet"
fi
all_po=yes
for lang in $languages; do
  if [ ! -f "$src/po/$lang.po" ]; then
    not_ok "po/$lang.po exists (listed in LINGUAS)"
    all_po=no
  elif have msgfmt; then
    check "msgfmt --check po/$lang.po" msgfmt --check --check-accelerators=_ -o /dev/null "$src/po/$lang.po"
  else
    skip "msgfmt --check po/$lang.po" "msgfmt not found"
  fi
done

# What i18n.merge_file does at build time, then validate the merged files.
if [ -n "$languages" ] && [ "$all_po" = yes ] && have msgfmt; then
  if msgfmt --desktop -d "$src/po" --template "$desktop_in" -o "$tmp/$app_id.desktop" >"$tmp/out" 2>&1; then
    if have desktop-file-validate; then
      check "translated desktop file validates" desktop-file-validate "$tmp/$app_id.desktop"
    else
      ok "msgfmt --desktop merges the translations"
    fi
  else
    not_ok "msgfmt --desktop merges the translations"; sed 's/^/# /' "$tmp/out"
  fi
  if msgfmt --xml -d "$src/po" --template "$metainfo_in" -o "$tmp/$app_id.metainfo.xml" >"$tmp/out" 2>&1; then
    if have appstreamcli; then
      check "translated metainfo validates" appstreamcli validate --no-net "$tmp/$app_id.metainfo.xml"
    else
      ok "msgfmt --xml merges the translations"
    fi
  else
    not_ok "msgfmt --xml merges the translations"; sed 's/^/# /' "$tmp/out"
  fi
fi

echo "1..$n"
[ "$failed" -eq 0 ]
