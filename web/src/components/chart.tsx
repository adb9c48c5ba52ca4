/**
 * A uPlot line chart sized to its container, in the theme's colours, with the same numbers as a
 * table for screen readers and keyboard users (charts are pictures to them).
 */
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { formatNumber } from '../format.js';
import { useTheme } from '../theme.js';

export interface Series {
  readonly label: string;
  /** One value per x, null for a gap. */
  readonly values: (number | null)[];
  /** Drawn dashed (a band's edges, a reference). */
  readonly dashed?: boolean;
}

export interface ChartProps {
  /** What the chart shows, for its accessible name. */
  readonly title: string;
  readonly x: number[];
  /** 'time': x is epoch seconds; 'number': a step, an index. */
  readonly xKind: 'time' | 'number';
  readonly xLabel: string;
  readonly series: Series[];
  readonly height?: number;
  /** Text for an x value in the table, and on the axis of integer x (default: the number, or the local time). */
  readonly xText?: (x: number) => string;
  /** x is a count (a step, a version's place): ticks only at whole numbers. */
  readonly integerX?: boolean;
}

const PALETTE = ['--series-1', '--series-2', '--series-3', '--series-4', '--series-5', '--series-6'];

function colour(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

export function Chart(props: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const theme = useTheme();
  // biome-ignore lint/correctness/useExhaustiveDependencies: the theme's colours are read from the page
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const axis = {
      stroke: colour('--text-muted'),
      grid: { stroke: colour('--grid') },
      ticks: { stroke: colour('--grid') },
    };
    const integerAxis = props.integerX
      ? {
          incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000],
          space: props.xText ? 110 : 40,
          values: (_: uPlot, splits: number[]) => splits.map((x) => (props.xText ? props.xText(x) : formatNumber(x))),
        }
      : {};
    const plot = new uPlot(
      {
        width: element.clientWidth || 600,
        height: props.height ?? 240,
        // Room on the right for the last x label.
        padding: [12, props.integerX && props.xText ? 56 : 16, 0, 0],
        scales: { x: { time: props.xKind === 'time' } },
        axes: [
          { ...axis, ...integerAxis, label: props.xLabel },
          { ...axis, size: 60 },
        ],
        series: [
          { label: props.xLabel },
          ...props.series.map((s, i) => ({
            label: s.label,
            stroke: colour(PALETTE[i % PALETTE.length]),
            width: 2,
            dash: s.dashed ? [6, 4] : undefined,
            points: { show: props.x.length < 60 },
            // A bucket or step without a value for one series: its line goes on to the next.
            spanGaps: true,
          })),
        ],
      },
      [props.x, ...props.series.map((s) => s.values)] as uPlot.AlignedData,
      element,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: element.clientWidth, height: props.height ?? 240 }));
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [props, theme]);
  const xText =
    props.xText ?? ((x: number) => (props.xKind === 'time' ? new Date(x * 1000).toLocaleString() : formatNumber(x)));
  return (
    <figure class="chart">
      <div
        ref={box}
        role="img"
        aria-label={`${props.title}: chart of ${props.series.map((s) => s.label).join(', ')} by ${props.xLabel}`}
      />
      <details>
        <summary>{props.title} as a table</summary>
        <div class="table-scroll">
          <table class="data">
            <thead>
              <tr>
                <th scope="col">{props.xLabel}</th>
                {props.series.map((s) => (
                  <th scope="col" key={s.label}>
                    {s.label}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {props.x.map((x, i) => (
                <tr key={x}>
                  <td>{xText(x)}</td>
                  {props.series.map((s) => (
                    <td class="num" key={s.label}>
                      {formatNumber(s.values[i])}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </details>
    </figure>
  );
}
