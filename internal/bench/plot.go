package bench

// PNG figures with gonum/plot, drawn the way the Tashkent paper draws its
// Fig. 4–13: one line per system, throughput or response time on y,
// clients (or replicas, the contention level c, the share of fast
// transactions) on x.

import (
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one line of a figure.
type series struct {
	name   string
	xs, ys []float64
	dashed bool // a model, not a measurement
}

// figure is one PNG.
type figure struct {
	title, xLabel, yLabel string
	series                []series
}

// save draws the figure into path (PNG, 6x4 inches).
func (f figure) save(path string) error {
	p := plot.New()
	p.Title.Text = f.title
	p.X.Label.Text = f.xLabel
	p.Y.Label.Text = f.yLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	top := 0.0
	for _, s := range f.series {
		for _, y := range s.ys {
			if !math.IsNaN(y) && !math.IsInf(y, 0) {
				top = max(top, y)
			}
		}
	}
	p.Y.Max = top * (1.15 + 0.07*float64(len(f.series))) // room for the legend above the data
	for i, s := range f.series {
		var pts plotter.XYs
		for j := range s.xs {
			if !math.IsNaN(s.ys[j]) && !math.IsInf(s.ys[j], 0) {
				pts = append(pts, plotter.XY{X: s.xs[j], Y: s.ys[j]})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		if i >= len(plotutil.SoftColors) { // colors repeat: tell the lines apart by dashes
			line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		}
		points.Shape = plotutil.Shape(i)
		if s.dashed {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			points.Shape = draw.CircleGlyph{}
			points.Radius = vg.Points(1)
			points.Color = color.Gray{Y: 100}
		}
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}
