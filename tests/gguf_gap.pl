# tests/gguf_gap.pl FILE: prints the file offset 1500 bytes into the tensor
# with the most bytes (a GGUF header walk: key/values, tensor infos,
# alignment): a byte the old sampled data hash never read (it_model_identity).
use strict; use warnings;
open(my $f, '<:raw', $ARGV[0]) or die "$ARGV[0]: $!";
local $/; my $d = <$f>; my $p = 0;
sub rd { my ($n) = @_; my $s = substr($d, $p, $n); $p += $n; return $s; }
sub u32 { unpack('V', rd(4)) } sub u64 { unpack('Q<', rd(8)) }
sub str { my $n = u64(); rd($n) }
my %sz = (0=>1,1=>1,2=>2,3=>2,4=>4,5=>4,6=>4,7=>1,10=>8,11=>8,12=>8);
my $align = 32;
sub val { my ($t, $key) = @_;
  if ($t == 8) { str(); } elsif ($t == 9) { my $et = u32(); my $n = u64(); val($et) for 1..$n; }
  else { my $v = rd($sz{$t}); $align = unpack('V', $v) if defined $key && $key eq 'general.alignment'; } }
rd(4); u32(); my $nt = u64(); my $nkv = u64();
for (1..$nkv) { my $k = str(); my $t = u32(); val($t, $k); }
my @off;
for (1..$nt) { str(); my $nd = u32(); u64() for 1..$nd; u32(); push @off, u64(); }
my $start = int(($p + $align - 1) / $align) * $align;
@off = sort { $a <=> $b } @off; push @off, length($d) - $start;
my ($best, $bsz) = (0, 0);
for my $i (0..$#off - 1) { my $s = $off[$i + 1] - $off[$i]; ($best, $bsz) = ($off[$i], $s) if $s > $bsz; }
print $start + $best + 1500, "\n";
