# Shared by scripts/demo and scripts/test (sourced, not run).

HM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

hm_say() { printf '\n==> %s\n' "$*"; }
hm_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# hm_install_packages: install what scripts/packages.txt lists and dpkg does
# not have yet. Runs apt-get update once, and only if something is missing.
hm_install_packages() {
  local pkg missing=()
  while read -r pkg; do
    pkg=${pkg%%#*}
    pkg=${pkg//[[:space:]]/}
    [ -n "$pkg" ] || continue
    if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]; then
      missing+=("$pkg")
    fi
  done <"$HM_ROOT/scripts/packages.txt"
  if [ ${#missing[@]} -eq 0 ]; then
    echo "all Debian packages present"
    return 0
  fi
  command -v apt-get >/dev/null || hm_die "missing packages (${missing[*]}) and no apt-get: install them by hand"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || hm_die "missing packages (${missing[*]}): run as root or install sudo"
    sudo=(sudo)
  fi
  hm_say "installing: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

hm_jobs() { nproc 2>/dev/null || echo 2; }
