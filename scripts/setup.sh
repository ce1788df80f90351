#!/usr/bin/env bash
# Installs everything sanqos' lab and tests need on a fresh Debian (bookworm)
# machine, as root: tgt, libiscsi, iptables/ipset, fuse3, chromium (the
# dashboard's browser test), QEMU with Debian's stock kernel, busybox and
# cpio (the stock-kernel tier, lab/guest; open-iscsi for its kernel
# initiator, run in the guest only), strace (sanqos doctor's test that it
# makes no state-creating system call), systemd's systemd-analyze and the
# kernel's uapi headers (packaging/'s tests verify the unit and rebuild its
# seccomp filters; systemd is only installed, not made PID 1), promtool (the
# alert rules' tests; from the prometheus package, its server not started),
# bash-completion (internal/pkgdeb's test completes with the Debian
# package's script), nftables (throttle's test that the guard puts back
# rules that `nft flush ruleset` took; the package's service stays
# disabled, as Debian ships it), and fio built from Debian's own source package with
# the libiscsi engine (Debian's binary fio lacks it). Idempotent: each step
# is skipped when its result is present.
set -euo pipefail

FIO_PREFIX=${FIO_PREFIX:-/usr/local}
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" != 0 ]; then
	echo "setup.sh: must run as root (it installs Debian packages)" >&2
	exit 1
fi

pkgs=(tgt libiscsi-dev libiscsi-bin iptables ipset iproute2 fuse3 kmod curl
	dpkg-dev build-essential pkg-config zlib1g-dev libaio-dev chromium
	qemu-system-x86 linux-image-amd64 busybox-static cpio etcd-server open-iscsi strace
	linux-libc-dev bash-completion nftables)
# systemd-analyze: from Debian's systemd package, unless this host has it.
command -v systemd-analyze >/dev/null || pkgs+=(systemd)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# promtool checks and unit-tests the alert rules (agent/alerts_test.go). It
# comes with Debian's prometheus package, wanted here for promtool alone:
# the server is kept from starting (a policy-rc.d, where none already
# stops services) and from starting at boot.
if ! command -v promtool >/dev/null; then
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT # also when apt-get fails
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends prometheus
	systemctl disable prometheus.service >/dev/null 2>&1 || true
fi

# Debian's iptables defaults to the nft backend; this kernel's nftables has no
# `queue` expression, so the delay line needs the legacy backend with xt_NFQUEUE.
if [ -x /usr/sbin/iptables-legacy ]; then
	update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null
	update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null
fi

# --disable-native: fio's default -march=native emits AVX-512 on this
# host, which QEMU's TCG (the stock-kernel tier, lab/guest) cannot run
# (SIGILL). The stamp marks a portable build, so an older native one is
# rebuilt.
stamp="$FIO_PREFIX/share/sanqos-fio-portable"
if [ ! -e "$stamp" ] || ! "$FIO_PREFIX/bin/fio" --enghelp 2>/dev/null | grep -qx '[[:space:]]*libiscsi'; then
	src=/var/cache/sanqos/fio-src
	if ! grep -rqs '^Types: deb-src' /etc/apt/sources.list.d/ /etc/apt/sources.list; then
		# Mirror the existing deb entries as deb-src so `apt-get source` works.
		sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
			>/etc/apt/sources.list.d/sanqos-deb-src.sources
		apt-get update -qq
	fi
	rm -rf "$src" && mkdir -p "$src"
	(cd "$src" && apt-get source -qq fio >/dev/null)
	dir=$(find "$src" -maxdepth 1 -mindepth 1 -type d -name 'fio-*' | head -n1)
	(cd "$dir" && ./configure --prefix="$FIO_PREFIX" --enable-libiscsi --disable-native >/dev/null &&
		make -s -j"$(nproc)" >/dev/null && make -s install >/dev/null)
	mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
"$FIO_PREFIX/bin/fio" --enghelp | grep -q libiscsi
echo "setup.sh: ok ($("$FIO_PREFIX/bin/fio" --version), $(tgtd --version 2>/dev/null | head -n1 || echo tgt))"
