{{/* The release's name for its objects: <release>-sluice, or <release> when it already says sluice. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 56 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 56 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The headless service of the peers: the pods' DNS names and --join dns:. */}}
{{- define "sluice.peers" -}}
{{- printf "%s-peers" (include "sluice.fullname" .) -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- default (printf "%s-auth" (include "sluice.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "sluice.envoyConfigMap" -}}
{{- default (printf "%s-envoy" (include "sluice.fullname" .)) .Values.envoy.existingConfigMap -}}
{{- end -}}

{{/* <name>.<namespace>.svc.<domain>: the suffix of the pods' stable DNS names. */}}
{{- define "sluice.peersDomain" -}}
{{- printf "%s.%s.svc.%s" (include "sluice.peers" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}
