# Throughput vs concurrency, drawn by `cargo bench --bench serve` from the table it writes.
# Usage: gnuplot -e "data='throughput.dat'; out='throughput.png'; machine='...'" benches/throughput.gp
set terminal pngcairo size 960,600 font "sans,11"
set output out
set title "Loopback throughput vs concurrent clients\n{/*0.8 ".machine."}"
set xlabel "concurrent clients (each downloading the whole artifact over and over, keep-alive)"
set ylabel "aggregate GB/s (median of rounds)"
set logscale x 2
set xtics ("1" 1, "8" 8, "64" 64)
set xrange [0.8:80]
set yrange [0:*]
set key outside right center box
set grid ytics
plot data using 1:2 with linespoints lw 2 pt 7 lc rgb "#b03030" title "nginx sendfile: full ISO copy", \
     data using 1:3 with linespoints lw 2 pt 5 lc rgb "#2060c0" title "bootstream: full ISO", \
     data using 1:4 with linespoints lw 2 pt 6 dt 2 lc rgb "#b03030" title "nginx: minimal ISO copy", \
     data using 1:5 with linespoints lw 2 pt 4 dt 2 lc rgb "#2060c0" title "bootstream: minimal ISO", \
     data using 1:6 with linespoints lw 2 pt 8 dt 3 lc rgb "#b03030" title "nginx: PXE initrd copy", \
     data using 1:7 with linespoints lw 2 pt 9 dt 3 lc rgb "#2060c0" title "bootstream: PXE initrd"
