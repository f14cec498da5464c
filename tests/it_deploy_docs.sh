#!/bin/sh
# deploy/README.md's account of `make install` names what it installs and
# enables: every config of ETC_CONFIGS (deploy/deploy.mk) and every program
# of USER_BINS ("qwen35-http" or its "-http" short form), so a unit that
# install enables (qwen35-http.service with http.conf) is not a surprise.
set -eu
. "$(dirname "$0")/lib.sh"
setup
# the paragraph that starts "`make install` puts"
awk '/^`make install` puts/ { on = 1 } on && /^$/ { exit } on' deploy/README.md >"$T/install"
[ -s "$T/install" ] || fail "deploy/README.md: no paragraph starting '\`make install\` puts'"
mk_list() {   # VAR: the words of VAR's assignments in deploy/deploy.mk (continued lines too)
    awk -v v="$1" '$1 == v && ($2 == ":=" || $2 == "+=") { on = 1; $1 = $2 = "" }
        on { c = /\\$/; sub(/\\$/, ""); print; if (!c) on = 0 }' deploy/deploy.mk | tr -s ' \t' '\n' | grep .
}
n=0
for c in $(mk_list ETC_CONFIGS); do
    grep -q -e "\`$c\`" -e "/$c\`" "$T/install" || fail "deploy/README.md: the make install paragraph does not name $c"
    n=$((n + 1))
done
for b in $(mk_list USER_BINS); do
    grep -q -e "\`$b\`" -e "\`-${b#qwen35-}\`" "$T/install" ||
        fail "deploy/README.md: the make install paragraph does not name $b"
    n=$((n + 1))
done
[ $n -ge 10 ] || fail "only $n configs and programs read from deploy/deploy.mk"
ok "the make install paragraph names all $n configs and programs"
