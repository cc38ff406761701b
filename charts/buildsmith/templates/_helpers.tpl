{{- define "buildsmith.labels" -}}
app.kubernetes.io/name: buildsmith
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "buildsmith.name" -}}
{{ .Release.Name }}-controller
{{- end -}}

{{/* The controller image: repository:tag (tag defaults to appVersion), pinned by digest when one is given. */}}
{{- define "buildsmith.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end -}}
