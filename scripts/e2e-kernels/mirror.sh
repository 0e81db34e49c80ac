# shellcheck shell=bash
# mirror.sh, sourced by fetch.sh and userland.sh: sets mirror and security
# (the Debian archive and its security archive, no trailing slash) and
# keyring. Both come from the machine's own apt sources (one-line .list and
# deb822 .sources) unless DEBIAN_MIRROR or DEBIAN_SECURITY_MIRROR give them:
# the tree names no archive host.
apt_uris() { # prints "URI SUITE" for each deb source the machine has
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] && awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++; print $i, $(i+1) }' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -f $f ]] && awk 'BEGIN { RS = ""; FS = "\n" } /(^|\n)Types:[^\n]*deb([ \t\n]|$)/ {
			u = ""; su = ""
			for (k = 1; k <= NF; k++) { if ($k ~ /^URIs:/) { split($k, a, /[ \t]+/); u = a[2] } if ($k ~ /^Suites:/) { split($k, b, /[ \t]+/); su = b[2] } }
			if (u != "") print u, su }' "$f"
	done
	return 0
}
mirror=${DEBIAN_MIRROR:-$(apt_uris | awk '$2 !~ /-security$/ { print $1; exit }')}
security=${DEBIAN_SECURITY_MIRROR:-$(apt_uris | awk '$2 ~ /-security$/ { print $1; exit }')}
mirror=${mirror%/} security=${security%/}
# shellcheck disable=SC2034 # used by the scripts that source this
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
